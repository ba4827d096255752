"""Per-partition manifests: what was read, with which config and code, and what came out."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from storage.layout import DataLayout
from storage.parquet import write_atomic_bytes

log = logging.getLogger(__name__)


class Manifest(BaseModel):
    """One partition of one stage. Small by design: tasks return it, never the data."""

    stage: str
    partition: str
    source: str = Field(description="Path or URL the partition was made from.")
    source_md5: str
    file_seq: int
    config_hash: str
    code_version: str
    status: Literal["complete", "partial"]
    error: str | None = None
    records_in: int
    rows_out: int
    kept: int
    dropped: dict[str, int]
    deleted_pmids: int = 0
    chunk: int | None = Field(None, description="Filter stage: the chunk (shared FAISS index) it was in.")
    notes: list[str] = Field(default_factory=list)
    outputs: list[str]
    started_at: datetime
    finished_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))

    @property
    def duration_s(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()


def write_manifest(layout: DataLayout, manifest: Manifest) -> Path:
    path = layout.manifest_path(manifest.stage, manifest.partition)
    write_atomic_bytes(path, manifest.model_dump_json(indent=2).encode())
    return path


def read_manifest(layout: DataLayout, stage: str, partition: str) -> Manifest | None:
    path = layout.manifest_path(stage, partition)
    if not path.exists():
        return None
    return Manifest.model_validate_json(path.read_text())


def is_current(
    layout: DataLayout, stage: str, partition: str, source_md5: str, config_hash: str, code: str
) -> bool:
    """Whether a complete partition made from exactly these inputs is on disk.

    Flows use it to refresh Prefect's cache when outputs were deleted behind its back.
    """
    m = read_manifest(layout, stage, partition)
    return (
        m is not None
        and m.status == "complete"
        and (m.source_md5, m.config_hash, m.code_version) == (source_md5, config_hash, code)
        and outputs_whole(m)
    )


def outputs_whole(m: Manifest) -> bool:
    """Whether every output of ``m`` is there and whole: a Parquet output's footer reads, and the
    first output (the partition itself; ingest's second is its deletions) holds the ``rows_out``
    rows the manifest counted. A damaged one is named in one warning (the caller then makes the
    partition again)."""
    for i, output in enumerate(map(Path, m.outputs)):
        if not output.exists():
            return False
        if output.suffix != ".parquet":
            continue
        try:
            rows = pq.ParquetFile(output).metadata.num_rows
        except (OSError, pa.ArrowException) as exc:
            log.warning("%s is damaged (%s): partition %s of %s is made again", output, exc, m.partition, m.stage)
            return False
        if i == 0 and rows != m.rows_out:
            log.warning("%s holds %d rows, its manifest %d: partition %s of %s is made again", output, rows,
                        m.rows_out, m.partition, m.stage)
            return False
    return True
