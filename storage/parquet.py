"""Atomic, idempotent Parquet partition writes.

A partition is written to a temporary file beside its final path and renamed into place
only when complete, so a crash never leaves a half-written ``part.parquet`` and a rerun
replaces the partition instead of appending to it.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write_partition(
    path: Path, schema: pa.Schema, batches: Iterable[list[dict]], constants: dict | None = None
) -> int:
    """Stream row batches (lists of dicts) into ``path`` atomically; return the row count.

    ``constants`` fills columns that are the same for every row of the partition (its
    source file, for instance). The file exists (possibly with zero rows) after return.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    rows = 0
    try:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for batch in batches:
                if not batch:
                    continue
                if constants:
                    for row in batch:
                        row.update(constants)
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                rows += len(batch)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return rows


def write_atomic_bytes(path: Path, data: bytes) -> None:
    """Write a small file (a manifest) atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


STALE_TEMPORARY = re.compile(r"^\..+\.[0-9a-f]{32}\.(tmp|part)$")
"""The names this module (``.<name>.<uuid>.tmp``) and the downloader (``.<name>.<uuid>.part``)
give unfinished files: what a killed process leaves behind."""


def remove_stale_temporaries(directories: list[Path]) -> int:
    """Delete every unfinished file or folder (:data:`STALE_TEMPORARY`) under ``directories``; how many.
    Only :mod:`storage.lock` calls it, as it takes a data root's writer lock: nothing else can
    be writing there then."""
    removed = 0
    for directory in directories:
        if not directory.is_dir():
            continue
        stale = [p for p in directory.rglob(".*") if STALE_TEMPORARY.match(p.name)]
        for path in stale:  # files and folders (a copy being published, a checkpoint being saved)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists() or path.is_symlink():
                path.unlink(missing_ok=True)
            else:
                continue  # inside a folder removed already
            removed += 1
    return removed
