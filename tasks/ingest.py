"""Prefect tasks of the ingest stage: list a snapshot, fetch one file, ingest one file."""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime, timezone
from pathlib import Path

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext
from prefect.states import State

from mosaic_core.config import IngestConfig
from mosaic_core.data.pairs import CODE_VERSION, FileStats, iter_rows
from storage import schemas
from storage.catalog import refresh_catalog
from storage.layout import DataLayout
from storage.manifest import Manifest, is_current, write_manifest
from storage.parquet import write_partition
from storage.sources import LocalFile, SourceFile, TransientDownloadError, fetch, list_source
from tasks.results import SERIALIZER, json_only, verified

log = logging.getLogger(__name__)
STAGE = "ingest"


class PartialFileError(RuntimeError):
    """A source file broke off mid-way: its good records are stored, the task still fails."""


def is_transient(task: Task, task_run: object, state: State) -> bool:
    """Retry downloads only for failures a retry can fix (timeouts, 5xx, bad checksums)."""
    try:
        state.result(raise_on_failure=True)
    except TransientDownloadError:
        return True
    except Exception:  # noqa: BLE001 (any other failure is final)
        return False
    return False


@task(name="list-snapshot", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=10,
      retry_condition_fn=is_transient)
def list_snapshot(cfg: IngestConfig) -> list[SourceFile]:
    files = list_source(cfg.source, cfg.subsets)
    if cfg.max_files:
        files = files[: cfg.max_files]
    log.info("%s: %d files", cfg.source, len(files))
    return files


@task(name="fetch-file", cache_policy=NO_CACHE, retries=4, retry_delay_seconds=[5, 30, 120, 300],
      retry_condition_fn=is_transient, task_run_name="fetch-{source.partition}")
def fetch_file(source: SourceFile, root: str) -> LocalFile:
    return fetch(source, DataLayout(root))


@json_only
def _ingest_cache_key(context: TaskRunContext, parameters: dict) -> str:
    local: LocalFile = parameters["local"]
    cfg: IngestConfig = parameters["cfg"]
    # The data root is part of the key: the same file ingested into two roots is two outputs.
    root = hashlib.sha256(str(DataLayout(parameters["root"]).root).encode()).hexdigest()[:12]
    return f"ingest-{local.md5}-{cfg.pairs.config_hash()}-{CODE_VERSION}-{root}"


def _ingest_output(p: dict) -> tuple[Path, bool]:
    layout, local, cfg = DataLayout(p["root"]), p["local"], p["cfg"]
    return layout.results_dir, is_current(layout, STAGE, local.source.partition, local.md5, cfg.pairs.config_hash(),
                                          CODE_VERSION)


@verified(_ingest_output)
@task(name="ingest-file", cache_key_fn=_ingest_cache_key, persist_result=True, result_serializer=SERIALIZER,
      retries=0, task_run_name="ingest-{local.source.partition}")
def ingest_file(local: LocalFile, cfg: IngestConfig, root: str) -> Manifest:
    """Parse one source file into its ``citations`` and ``deletions`` partitions + manifest.

    Raises :class:`PartialFileError` (after storing every record read before the fault)
    when the file is truncated or malformed, so the run fails loudly and a rerun retries it.
    """
    layout, src = DataLayout(root), local.source
    started = datetime.now(timezone.utc)
    stats = FileStats()
    constants = {"file_seq": src.file_seq, "source_file": src.partition}
    rows = write_partition(
        layout.partition_path("citations", src.partition),
        schemas.CITATIONS,
        iter_rows(local.path, cfg.pairs, stats, cfg.batch_rows),
        constants,
    )
    write_partition(
        layout.partition_path("deletions", src.partition),
        schemas.DELETIONS,
        [[{"pmid": p} for p in stats.deleted_pmids]],
        constants,
    )
    manifest = Manifest(
        stage=STAGE,
        partition=src.partition,
        source=src.location,
        source_md5=local.md5,
        file_seq=src.file_seq,
        config_hash=cfg.pairs.config_hash(),
        code_version=CODE_VERSION,
        status="partial" if stats.error else "complete",
        error=stats.error,
        records_in=stats.records,
        rows_out=rows,
        kept=stats.kept,
        dropped=stats.as_counts(),
        deleted_pmids=len(stats.deleted_pmids),
        notes=stats.malformed_examples,
        outputs=[
            str(layout.partition_path("citations", src.partition)),
            str(layout.partition_path("deletions", src.partition)),
        ],
        started_at=started,
    )
    write_manifest(layout, manifest)
    log.info("%s: %d records, %d kept, dropped %s", src.partition, stats.records, stats.kept,
             {k: v for k, v in manifest.dropped.items() if v})
    if stats.error:
        raise PartialFileError(
            f"{src.partition}: stored the {stats.records} records read before the fault and "
            f"marked the partition partial. {stats.error}"
        )
    return manifest


@task(name="refresh-catalog", cache_policy=NO_CACHE)
def refresh_catalog_task(root: str) -> str:
    return str(refresh_catalog(DataLayout(root)))
