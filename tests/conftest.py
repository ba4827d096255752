"""Shared fixtures: hand-written PubMed XML, a local HTTP mirror, a Prefect test server."""

from __future__ import annotations

import functools
import http.server
import os
import threading

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    fail_next: dict[str, int] = {}

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        remaining = self.fail_next.get(self.path, 0)
        if remaining:
            self.fail_next[self.path] = remaining - 1
            self.send_error(503, "try again")
            return
        super().do_GET()


@pytest.fixture
def http_mirror(tmp_path):
    """Serve ``tmp_path/mirror`` on 127.0.0.1; yields (base_url, mirror_dir, fail_next)."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    fail_next: dict[str, int] = {}
    handler = type("H", (_QuietHandler,), {"fail_next": fail_next})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(mirror))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/pubmed/", mirror, fail_next
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect server (SQLite) for every flow test of the session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
