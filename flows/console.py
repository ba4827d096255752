"""What a ``mosaic`` command shows when something fails: one message on the console, the whole
log with every traceback in a file.

Prefect logs the traceback of a failed task and of every flow above it; on the console that
is hundreds of lines with the one sentence that matters at the bottom. While a command runs,
the console shows each record without its traceback, and :func:`full_log` keeps every record,
tracebacks included, in ``$PREFECT_HOME/mosaic-logs/`` (the newest :data:`KEEP` files).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

KEEP = 20
MESSAGE_LINES = 5


class _WithoutTraceback(logging.Formatter):
    """Formats as ``inner`` does, leaving out the traceback (which the log file keeps)."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info = record.exc_text = record.stack_info = None
        try:
            return self.inner.format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


class _NoDeadLinks(logging.Filter):
    """Leaves out Prefect's "View at http://…/runs/…" lines: they point at the temporary server
    a command starts, which is gone when the command ends (``mosaic serve``, or a
    ``PREFECT_API_URL`` of your own, keeps runs to look at)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("View at http://127.0.0.1:")


def _log_dir() -> Path:
    from prefect.settings import PREFECT_HOME

    return Path(PREFECT_HOME.value()).expanduser() / "mosaic-logs"


@contextmanager
def full_log(command: str, tracebacks_on_console: bool) -> Iterator[Path]:
    """Within the block every log record also goes to a new file (yielded), and the console
    shows tracebacks only if ``tracebacks_on_console``."""
    from prefect.logging.configuration import setup_logging
    from prefect.logging.handlers import PrefectConsoleHandler

    setup_logging()  # Prefect's console handler on the root logger, as a flow run would set it up
    directory = _log_dir()
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    path = directory / f"{stamp}-{command.replace(' ', '-')}-{os.getpid()}.log"
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    consoles = [h for h in root.handlers if isinstance(h, PrefectConsoleHandler)]
    formatters = [h.formatter for h in consoles]
    if not tracebacks_on_console:
        for h in consoles:
            h.setFormatter(_WithoutTraceback(h.formatter))
    dead_links = _NoDeadLinks()
    if not os.environ.get("PREFECT_API_URL"):  # the command's API is a temporary server
        for h in consoles:
            h.addFilter(dead_links)
    try:
        yield path
    finally:
        for h, formatter in zip(consoles, formatters, strict=True):
            h.setFormatter(formatter)
            h.removeFilter(dead_links)
        root.removeHandler(handler)
        handler.close()
        for old in sorted(directory.glob("*.log"))[:-KEEP]:
            old.unlink(missing_ok=True)


def short(message: str, lines: int = MESSAGE_LINES) -> str:
    """``message`` cut to its first ``lines`` lines (saying how many were left out)."""
    parts = message.strip().splitlines() or [""]
    if len(parts) <= lines:
        return "\n".join(parts)
    return "\n".join(parts[:lines]) + f"\n… ({len(parts) - lines} more lines in the log)"
