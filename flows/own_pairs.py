"""The own-pairs source: a user's (query, document) pairs → partitions of the data root, as the
ingest flow makes of a PubMed snapshot, then the filter; the rest of the pipeline reads them the
same way."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_table_artifact

from flows.filter import filter_latest_pairs
from mosaic_core.config import OwnPairsConfig, OwnPairsSource, PipelineConfig
from storage.lock import root_lock
from storage.manifest import Manifest
from tasks.ingest import refresh_catalog_task
from tasks.own_pairs import import_pairs


@flow(name="own-pairs")
def own_pairs_flow(cfg: OwnPairsConfig, root: str) -> list[Manifest]:
    """Bring the pairs of ``cfg.path`` into data root ``root`` (from cache when unchanged)."""
    with root_lock(root, "own-pairs flow"):
        manifests = import_pairs(cfg, root)
        refresh_catalog_task(root)
        create_table_artifact(
            key="own-pairs", description=f"Pairs of {cfg.path}: kept and dropped by reason",
            table=[{"partition": m.partition, "rows": m.records_in, "kept": m.kept,
                    **{k: v for k, v in m.dropped.items() if v}} for m in manifests])
        return manifests


def own_pairs(source: OwnPairsSource, cfg: PipelineConfig, data_root: str) -> tuple[list[Manifest], list[Manifest]]:
    """(import manifests, filter manifests) of the pairs ``source`` names, in ``data_root``."""
    return own_pairs_flow(source, data_root), filter_latest_pairs(cfg, data_root, source.path)
