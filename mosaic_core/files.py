"""Writing a file whole or not at all: under a temporary name in its folder, renamed into place.
A failed write (a full disk included) removes its temporary; the temporary names
(``.<name>.<32 hex digits>.tmp``) are those a data root's writer lock sweeps up after a process
that was killed mid-write (:data:`storage.parquet.STALE_TEMPORARY`)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def temporary_path(path: Path) -> Path:
    """A fresh temporary name beside ``path``."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


def remove(path: Path) -> None:
    """Remove the file or folder ``path`` if it is there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; renamed to ``path`` when the block ends, removed
    if it raises."""
    tmp = temporary_path(Path(path))
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        remove(tmp)
        raise
