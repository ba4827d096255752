"""What the last successful rebuild saw of the snapshot source, to detect new files."""

from __future__ import annotations

import json
from pathlib import Path

from storage.layout import DataLayout
from storage.parquet import write_atomic_bytes
from storage.sources import SourceFile


def snapshot_signature(files: list[SourceFile]) -> dict[str, str]:
    """{partition: version} of a listing. A remote file's version is its name (PubMed never
    rewrites a published file: new data arrives as new update files or a new baseline year);
    a local file's is its size and modification time, so an edited file counts as changed."""
    signature = {}
    for f in files:
        if f.is_remote:
            signature[f.partition] = f.name
        else:
            stat = Path(f.location).stat()
            signature[f.partition] = f"{f.name}:{stat.st_size}:{stat.st_mtime_ns}"
    return signature


def read_snapshot_state(layout: DataLayout) -> dict[str, str] | None:
    """The signature recorded by the last successful rebuild, or None before the first."""
    path = layout.snapshot_state_path
    return json.loads(path.read_text()) if path.is_file() else None


def write_snapshot_state(layout: DataLayout, signature: dict[str, str]) -> None:
    path = layout.snapshot_state_path
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic_bytes(path, json.dumps(signature, indent=1, sort_keys=True).encode())
