"""A full disk, said in one line: which data root, how much is free, what to do.

A write that fails for space surfaces as ``OSError(ENOSPC)`` or ``EDQUOT`` from Python's own
writes, but some writers hide the cause: ``torch.save`` reports only ``unexpected pos … vs …``.
So a failure counts as a full disk when its exception chain holds either errno, or when a data
root this process wrote has less than :data:`LOW_BYTES` free by the time the failure is reported.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterable
from pathlib import Path

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
LOW_BYTES = 64 * 2**20
"""Free space under which a failed write is taken for a full disk."""

WRITTEN: dict[Path, str] = {}
"""The data roots this process has held the writer lock of (:func:`storage.lock.root_lock` adds
them) and the output folders it writes without one (:func:`writing`)."""


def writing(folder: str | Path) -> None:
    """Name ``folder`` as one this process writes: a full disk under it is reported as such."""
    WRITTEN.setdefault(Path(folder).expanduser().resolve(), "output folder")


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def free_bytes(path: Path) -> tuple[int, int]:
    """(free, total) bytes of the file system holding ``path`` (its nearest existing ancestor)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    usage = shutil.disk_usage(path)
    return usage.free, usage.total


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def no_space_message(root: Path, need: int | None = None, what: str = "data root") -> str:
    free, total = free_bytes(root)
    needs = f"needs about {_mib(need)}, " if need else ""
    return (f"{what} {root}: no space left on its device ({needs}{_mib(free)} free of {_mib(total)}). Free space "
            f"there or pass a{'n' if what[0] in 'aeiou' else ''} {what} on a larger disk; a rerun keeps every step "
            "that finished")


def space_problem(exc: BaseException, roots: Iterable[Path] | None = None) -> str | None:
    """The one-line message when ``exc`` came from a full disk under one of ``roots`` (default:
    :data:`WRITTEN`), else None."""
    named = dict(WRITTEN) if roots is None else {Path(r): "data root" for r in roots}
    if not named:
        return None
    hit = next((e for e in _chain(exc) if isinstance(e, OSError) and e.errno in NO_SPACE), None)
    if hit is not None and getattr(hit, "filename", None):
        owner = next((r for r in sorted(named) if Path(hit.filename).resolve().is_relative_to(r)), None)
        if owner is not None:
            return no_space_message(owner, what=named[owner])
    low = [r for r in sorted(named) if free_bytes(r)[0] < LOW_BYTES]
    if low:
        return no_space_message(low[0], what=named[low[0]])
    first = min(named)
    return no_space_message(first, what=named[first]) if hit is not None else None


def check_space(root: Path, need: int) -> None:
    """Raise :class:`NoSpace` when the file system of ``root`` has less than ``need`` bytes free."""
    free, _ = free_bytes(root)
    if free < need:
        raise NoSpace(no_space_message(Path(root).expanduser().resolve(), need))


class NoSpace(OSError):
    """Not enough disk for the run; the message says how much it needs and has."""
