"""One writer per data root: an exclusive lock on ``ROOT/.mosaic.lock``.

Every command and flow that writes a data root holds :func:`root_lock` while it does. The lock
is ``flock(2)`` on the open lock file, so the kernel releases it when its holder ends, however
it ends (``kill -9`` included): a lock is never left held by a dead process. The file also says
who holds it — pid, host, command, start time — for the message a second writer gets, and a
holder that died leaves that record behind, so the next writer can say whose lock it took over,
and the unfinished temporary files a killed writer left are removed as the lock is taken.

Written with ``fcntl`` rather than the ``filelock`` package: filelock truncates the lock file as
it opens it, before it knows whether it holds the lock, which would erase the record a waiting
writer reads. Within one process the lock is re-entrant (a parent flow and the stage flows it
calls, and their task threads, share it).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from storage.parquet import remove_stale_temporaries
from storage.space import WRITTEN
from storage.stopping import stops_honoured

log = logging.getLogger(__name__)

LOCK_FILE = ".mosaic.lock"
SERVE_LOCK_FILE = ".mosaic-serve.lock"
POLL_S = 0.5


class RootBusy(RuntimeError):
    """Another process is writing the data root; the message names it and what to do."""


@dataclass
class _Held:
    fd: int
    depth: int


_HELD: dict[Path, _Held] = {}
_GUARD = threading.Lock()


def _root(root: str | Path) -> Path:
    return Path(root).expanduser().resolve()


def holder(root: str | Path) -> dict:
    """The record of the process holding (or that last held without releasing) ``root``'s lock;
    ``{}`` when there is none."""
    path = _root(root) / LOCK_FILE
    try:
        return _parse(path.read_bytes())
    except OSError:
        return {}


def _parse(data: bytes) -> dict:
    try:
        record = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def describe(record: dict) -> str:
    """``mosaic run (pid 12 on host, since 2026-11-25 10:00:00 UTC)``, from a lock record."""
    if not record:
        return "another process"
    return (f"`{record.get('command', 'mosaic')}` (pid {record.get('pid', '?')} on {record.get('host', '?')}, "
            f"since {record.get('since', '?')})")


def is_held(root: str | Path) -> bool:
    """Whether this process holds ``root``'s lock."""
    with _GUARD:
        return _root(root) in _HELD


def _read_fd(fd: int) -> dict:
    return _parse(os.pread(fd, 1 << 16, 0))


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _acquire(root: Path, command: str, wait: float | None, lock_file: str = LOCK_FILE,
             advice: str = "use --wait, or stop it") -> int:
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = None if wait is None else time.monotonic() + wait
    announced = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                record = _read_fd(fd)
                if deadline is not None and time.monotonic() >= deadline:
                    waited = f" (waited {wait:.0f} s)" if wait else ""
                    raise RootBusy(f"data root {root} is in use by {describe(record)}{waited}; {advice}") from None
                if not announced:
                    log.warning("data root %s is in use by %s: waiting for it", root, describe(record))
                    announced = True
                time.sleep(POLL_S)
        left = _read_fd(fd)
        if left:  # a holder that released would have cleared its record: this one died holding the lock
            here = left.get("host") == socket.gethostname()
            state = "no longer running" if here and not _alive(left.get("pid")) else "gone from the lock"
            log.warning("data root %s: took over the lock left by %s, %s", root, describe(left), state)
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                  "since": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _remove_stale(root: Path) -> None:
    """Delete the unfinished files a killed writer left under ``root``: with the lock just taken,
    no other process can be writing them."""
    removed = remove_stale_temporaries([root])
    if removed:
        log.warning("data root %s: removed %d unfinished file(s) an interrupted run left", root, removed)


def _release(fd: int) -> None:
    try:
        os.ftruncate(fd, 0)  # an empty record: released cleanly
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def root_lock(root: str | Path | None, command: str, wait: float | None = 0.0,
              advice: str = "use --wait, or stop it") -> Iterator[Path | None]:
    """Hold ``root``'s writer lock for the block; yields the resolved root (``root`` None: a
    flow that writes no data root this time, nothing to lock).

    ``command`` names the holder in a second writer's message (``mosaic ingest``). ``wait``:
    seconds to wait for another writer before raising :class:`RootBusy` (0: raise at once;
    ``None``: wait as long as it takes); ``advice``: what the message of :class:`RootBusy` tells
    its reader to do. Re-entrant within a process: an inner block of the same root (a stage flow
    inside the pipeline, a task thread) returns at once. A SIGTERM or SIGINT to the holder ends
    the block wherever it lands (:mod:`storage.stopping`): a flow run served by ``mosaic serve``
    or a worker stops, and so releases the lock, even where Prefect's engine would have lost the
    signal.
    """
    if root is None:
        yield None
        return
    path = _root(root)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"data root {path} is a file: pass a folder (it is created if missing)")
    with _GUARD:  # held while acquiring too: two threads of one process never both call flock
        held = _HELD.get(path)
        if held is None:
            held = _HELD[path] = _Held(_acquire(path, command, wait, advice=advice), 0)
            _remove_stale(path)
            WRITTEN[path] = "data root"
        held.depth += 1
    try:
        with stops_honoured():  # a stop that lands where Prefect loses it still ends the writer
            yield path
    finally:
        with _GUARD:
            held.depth -= 1
            done = held.depth == 0
            if done:
                del _HELD[path]
        if done:
            _release(held.fd)



@contextmanager
def serve_lock(root: str | Path, command: str) -> Iterator[Path]:
    """Held by the one ``mosaic serve`` of ``root`` while it serves (``ROOT/.mosaic-serve.lock``,
    taken and released by the kernel as the writer lock is, so a killed serve holds nothing): a
    second serve of the same root raises :class:`RootBusy` naming the first. Not the writer
    lock: a served run takes that one, in a process of its own, only while it writes."""
    path = _root(root)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"data root {path} is a file: pass a folder (it is created if missing)")
    fd = _acquire(path, command, 0.0, SERVE_LOCK_FILE,
                  "stop it first, or trigger a run of the deployment it serves")
    try:
        yield path
    finally:
        _release(fd)
