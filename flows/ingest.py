"""The PubMed source: the ingest flow (snapshot → one mapped task per file → Parquet partitions +
catalog), then the filter; a scheduled rebuild watches the snapshot's files."""

from __future__ import annotations

import logging

from prefect import flow
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.futures import as_completed
from tqdm.auto import tqdm

from flows.filter import filter_latest_pairs
from flows.runners import task_runner
from mosaic_core.config import IngestConfig, PipelineConfig
from storage.lock import root_lock
from storage.manifest import Manifest
from storage.sources import SourceFile
from tasks.ingest import fetch_file, ingest_file, list_snapshot, refresh_catalog_task

log = logging.getLogger(__name__)


class IngestFailed(RuntimeError):
    """Some files could not be ingested; the others are stored and cached."""


@flow(name="ingest", log_prints=False)
def ingest_flow(cfg: IngestConfig, root: str, progress: bool = True) -> list[Manifest]:
    """Ingest every file of ``cfg.source`` under data root ``root``.

    Files whose checksum, pair config and code version are unchanged come from Prefect's
    cache; new, changed and previously failed files are processed. Failed files fail the
    flow after every other file has been stored and the catalog refreshed.
    """
    with root_lock(root, "ingest flow"):
        files = list_snapshot(cfg)
        fetched = {f.partition: fetch_file.submit(f, root) for f in files}
        ingesting, failures = {}, []
        for partition, fut in fetched.items():
            # A failed download must not stop the other files: its ingest is never submitted.
            local = fut.result(raise_on_failure=False)
            if isinstance(local, BaseException):
                failures.append(f"{partition} (download): {local}")
            else:
                ingesting[ingest_file.submit(local, cfg, root)] = partition
        manifests = []
        # The artifact counts files itself: a bar off (no terminal) counts nothing.
        done = len(failures)
        bar_id = create_progress_artifact(100.0 * done / max(len(files), 1), key="ingest-progress",
                                          description="files ingested")
        with tqdm(total=len(files), initial=done, desc="ingest", unit="file",
                  disable=None if progress else True) as bar:
            for fut in as_completed(list(ingesting)):
                result = fut.result(raise_on_failure=False)
                if isinstance(result, BaseException):
                    failures.append(f"{ingesting[fut]}: {result}")
                else:
                    manifests.append(result)
                done += 1
                bar.update(1)
                update_progress_artifact(bar_id, 100.0 * done / max(len(files), 1))
        refresh_catalog_task(root)
        create_table_artifact(
            key="ingest-files",
            table=[
                {"file": m.partition, "status": m.status, "records": m.records_in, "kept": m.kept,
                 **{k: v for k, v in m.dropped.items() if v}}
                for m in sorted(manifests, key=lambda m: (m.file_seq, m.partition))
            ],
            description="Per-file ingest counts (kept and dropped by reason)",
        )
        if failures:
            raise IngestFailed(f"{len(failures)} of {len(files)} files failed: " + "; ".join(failures))
        return manifests


def pubmed_pairs(source: IngestConfig, cfg: PipelineConfig, data_root: str) -> tuple[list[Manifest], list[Manifest]]:
    """(ingest manifests, filter manifests) of the snapshot ``source`` names, in ``data_root``."""
    ingested = ingest_flow.with_options(task_runner=task_runner(cfg.workers, cfg.dask_address))(source, data_root)
    return ingested, filter_latest_pairs(cfg, data_root, f"the citations in {data_root}")


def snapshot_files(source: IngestConfig, data_root: str) -> list[SourceFile]:
    """The snapshot's files (name, size, time): a rebuild runs when one is new or changed."""
    return list_snapshot(source)
