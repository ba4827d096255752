"""The Prefect API a command talks to: the configured one, or a temporary server that cannot
outlive the command.

Prefect starts a temporary API server of its own when none is configured, as a child process
that a ``kill -9`` of the command leaves running. Here the temporary server is started the same
way (uvicorn serving Prefect's app on 127.0.0.1, UI off) but asks the kernel to stop it when
its parent dies (``PR_SET_PDEATHSIG``), however the parent died, and runs in a session of its
own, so that a signal to the command's process group (``^C``, ``timeout``, a container stop) reaches
only the command: its flows then record their end on the server, and the command stops it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child, between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _send_pending(timeout_s: float = 10.0) -> None:
    """Send the log records and events still queued for the server while it is up: Prefect's
    workers otherwise drain at interpreter exit, into a server that is gone, retrying for a minute."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        worker.drain_all(timeout=timeout_s)


class _Temporary:
    """The command's temporary server: spawned on :meth:`start`, waited for on :meth:`ready`."""

    def __init__(self, url: str, port: int, timeout_s: float):
        self.url, self.port, self.timeout_s = url, port, timeout_s
        self.server: subprocess.Popen | None = None
        self.errors = None
        self.waited = False

    def start(self) -> None:
        if self.server is not None:
            return
        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
               "PREFECT__SERVER_FINAL": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        # The server's own output goes to a file: a server stopped half-way through its start-up
        # prints a shutdown traceback that is not news.
        self.errors = tempfile.TemporaryFile(mode="w+", prefix="mosaic-prefect-server-")
        self.server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app", "--host",
             "127.0.0.1", "--port", str(self.port), "--log-level", "error", "--lifespan", "on"],
            env=env, preexec_fn=_die_with_parent, stdout=self.errors, stderr=subprocess.STDOUT,
            start_new_session=True)  # a ^C or a `timeout` signals the command's group: not the server

    def ready(self) -> None:
        self.start()
        if not self.waited:
            _wait_healthy(self.server, self.errors, self.url, self.timeout_s)
            self.waited = True

    def stop(self) -> None:
        if self.server is None:
            return
        if self.waited:
            _send_pending()
        self.server.terminate()
        try:
            self.server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()
        if self.waited:  # what the server said while flows ran on it is the user's to read
            sys.stderr.write(_said(self.errors))
        self.errors.close()


_CURRENT: list[_Temporary] = []
"""The running command's temporary server (empty: a configured API, or no command)."""


def start_api() -> None:
    """Start the command's temporary server, if it has one and it is not started: the CLI calls
    it once the input is checked and the data root is locked, so a wrong input, a wrong config
    or a busy root is reported before any server starts; the flow's imports overlap its start."""
    for server in _CURRENT:
        server.start()


def api_ready() -> None:
    """Block until the command's temporary server answers (started now if it is not; at once
    with a configured API)."""
    for server in _CURRENT:
        server.ready()


@contextmanager
def command_api(timeout_s: float = 120.0) -> Iterator[str | None]:
    """Within the block, flows use the configured Prefect API (``PREFECT_API_URL``), else a
    temporary server on 127.0.0.1 tied to this process, started by :func:`start_api` (or
    :func:`api_ready`) and stopped when the block ends; yields its URL (None: the configured)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value() or not sys.platform.startswith("linux"):
        yield None
        return
    port = _free_port()
    server = _Temporary(f"http://127.0.0.1:{port}/api", port, timeout_s)
    _CURRENT.append(server)
    try:
        with temporary_settings(updates={PREFECT_API_URL: server.url}):
            yield server.url
    finally:
        _CURRENT.remove(server)
        server.stop()


def _said(errors) -> str:
    errors.seek(0)
    return errors.read()


def _wait_healthy(server: subprocess.Popen, errors, url: str, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        if server.poll() is not None:
            tail = _said(errors)[-4000:]
            raise RuntimeError(f"the temporary Prefect server exited with {server.returncode}:\n{tail}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            tail = _said(errors)[-4000:]
            raise RuntimeError(f"the temporary Prefect server did not answer within {timeout_s:.0f} s:\n{tail}")
        time.sleep(0.2)
