"""The filter flow: candidate pairs → cached embeddings per partition → consistency (or
threshold) filter per chunk of partitions → ``filtered`` Parquet + manifests + catalog."""

from __future__ import annotations

import numpy as np
from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from mosaic_core.config import FilterConfig
from mosaic_core.consistency import group_by_size, score_histogram
from storage.catalog import Catalog
from storage.layout import DataLayout
from storage.manifest import Manifest
from tasks.filter import encode_partition_for, filter_chunk_for, list_partitions
from tasks.ingest import refresh_catalog_task


@flow(name="filter")
def filter_flow(source: str, cfg: FilterConfig, root: str) -> list[Manifest]:
    """Filter the pairs of ``source`` (a data root's latest pairs, or a pairs file) into ``root``."""
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


def score_report(root: str, bins: int = 20) -> str:
    """Markdown: the distribution of cosine(query, document) over all filtered pairs, with the
    share kept at each threshold, so a user can choose one for threshold mode."""
    with Catalog(DataLayout(root), read_only=True) as cat:
        cosine = np.asarray([r[0] for r in cat.rows("SELECT cosine FROM filtered")], dtype=np.float32)
    if not len(cosine):
        return "no filtered pairs yet"
    lines = ["| cosine | pairs | kept if threshold = low |", "| --- | ---: | ---: |"]
    for lo, hi, count in score_histogram(cosine, bins):
        if count:
            lines.append(f"| {lo:+.1f} … {hi:+.1f} | {count:,} | {(cosine >= lo).mean():.1%} |")
    quantiles = np.quantile(cosine, [0.1, 0.25, 0.5, 0.75, 0.9])
    return ("cosine(query, document): " + ", ".join(f"p{int(p * 100)}={v:.3f}" for p, v in
                                                    zip((0.1, 0.25, 0.5, 0.75, 0.9), quantiles, strict=True))
            + "\n\n" + "\n".join(lines))
