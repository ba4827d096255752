"""The filter flow: candidate pairs → cached embeddings per partition → consistency (or
threshold) filter per chunk of partitions → ``filtered`` Parquet + manifests + catalog."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from mosaic_core.config import FilterConfig
from mosaic_core.data.consistency import group_by_size
from storage.lock import root_lock
from storage.manifest import Manifest
from tasks.filter import encode_partition_for, filter_chunk_for, list_partitions, score_report
from tasks.ingest import refresh_catalog_task


@flow(name="filter")
def filter_flow(source: str, cfg: FilterConfig, root: str) -> list[Manifest]:
    """Filter the pairs of ``source`` (a data root's latest pairs, or a pairs file) into ``root``."""
    with root_lock(root, "filter flow"):
        parts = list_partitions(source, cfg)
        encoded = [encode_partition_for(p, cfg, root).submit(p, cfg, root) for p in parts]
        encoded = [f.result() for f in encoded]
        groups = group_by_size([e.rows for e in encoded], cfg.chunk_size)
        futures = []
        for i, group in enumerate(groups):
            chunk = [encoded[j] for j in group]
            futures.append(filter_chunk_for(chunk, root).submit(i, chunk, cfg, root))
        manifests = [m for f in futures for m in f.result()]
        refresh_catalog_task(root)
        create_markdown_artifact(key="filter-scores", markdown=score_report(root),
                                 description="cosine(query, document) distribution, to pick a threshold")
        create_table_artifact(
            key="filter-partitions",
            table=[{"partition": m.partition, "pairs": m.rows_out, "kept": m.kept,
                    "kept %": round(100 * m.kept / max(m.rows_out, 1), 1),
                    **{k: v for k, v in m.dropped.items() if v}} for m in manifests],
            description=f"{cfg.mode} filter with {cfg.model}",
        )
        return manifests
