"""The Prefect API a command talks to: the configured one, or a temporary server that cannot
outlive the command.

Prefect starts a temporary API server of its own when none is configured, as a child process
that a ``kill -9`` of the command leaves running. Here the temporary server is started the same
way (uvicorn serving Prefect's app on 127.0.0.1, UI off) but asks the kernel to stop it when
its parent dies (``PR_SET_PDEATHSIG``), however the parent died.
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


_READY: list = []
"""The running command's wait for its temporary server (empty: nothing to wait for)."""


def api_ready() -> None:
    """Block until the command's temporary server answers (at once with a configured API).
    The CLI calls it just before it runs a flow, so a wrong input is reported while the server
    is still starting, not after it."""
    while _READY:
        _READY.pop()()


@contextmanager
def command_api(timeout_s: float = 120.0) -> Iterator[str | None]:
    """Within the block, flows use the configured Prefect API (``PREFECT_API_URL``), else a
    temporary server on 127.0.0.1 tied to this process, started at once and waited for in
    :func:`api_ready`; yields its URL (None: the configured)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value() or not sys.platform.startswith("linux"):
        yield None
        return
    port = _free_port()
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    # The server's own output goes to a file: a server stopped half-way through its start-up (a
    # wrong input reported before any flow ran) prints a shutdown traceback that is not news.
    errors = tempfile.TemporaryFile(mode="w+", prefix="mosaic-prefect-server-")
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app",
                               "--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on"],
                              env=env, preexec_fn=_die_with_parent, stdout=errors, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/api"
    _READY.append(lambda: _wait_healthy(server, errors, url, timeout_s))
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
    finally:
        used = not _READY
        _READY.clear()
        if used:
            _send_pending()
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if used:  # what the server said while flows ran on it is the user's to read
            sys.stderr.write(_said(errors))
        errors.close()


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
