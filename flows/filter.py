"""The filter flow: candidate pairs → cached embeddings per partition → consistency (or
threshold) filter per chunk of partitions → ``filtered`` Parquet + manifests + catalog."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TypeVar

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.futures import PrefectFuture

from flows.runners import task_runner
from mosaic_core.config import FilterConfig, PipelineConfig
from mosaic_core.data.consistency import group_by_size
from storage.lock import root_lock
from storage.manifest import Manifest
from tasks.filter import encode_partition, filter_chunk, list_partitions, score_report
from tasks.ingest import refresh_catalog_task
from tasks.own_pairs import check_enough_pairs

T = TypeVar("T")


def bounded(submit: Callable[[T], PrefectFuture], items: list[T], limit: int | None) -> list:
    """The results of ``submit(item)`` for every item, in order, with at most ``limit`` in flight
    (``None``: all at once)."""
    pending: deque[PrefectFuture] = deque()
    results = []
    for item in items:
        if limit is not None and len(pending) >= limit:
            results.append(pending.popleft().result())
        pending.append(submit(item))
    return results + [f.result() for f in pending]


@flow(name="filter")
def filter_flow(source: str, cfg: FilterConfig, root: str, concurrency: int | None = 1) -> list[Manifest]:
    """Filter the pairs of ``source`` (a data root's latest pairs, or a pairs file) into ``root``.

    ``concurrency``: partitions encoded, and chunks filtered, at once. One by default: on one
    machine the encoder already uses every core, and a chunk holds its pairs' query and document
    embeddings (1M pairs with gte-base: 6 GB a float32 copy), so more at once only multiplies memory;
    ``None`` leaves it to the task runner (a Dask cluster runs one per worker)."""
    with root_lock(root, "filter flow"):
        parts = list_partitions(source, cfg)
        encoded = bounded(lambda p: encode_partition.submit(p, cfg, root), parts, concurrency)
        groups = group_by_size([e.rows for e in encoded], cfg.chunk_size)
        chunks = [(i, [encoded[j] for j in group]) for i, group in enumerate(groups)]
        manifests = [m for done in bounded(lambda c: filter_chunk.submit(c[0], c[1], cfg, root),
                                           chunks, concurrency) for m in done]
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


def filter_latest_pairs(cfg: PipelineConfig, data_root: str, where: str) -> list[Manifest]:
    """A run's ingested pairs (the latest pairs of ``data_root``, read from ``where``) counted —
    a clear error before any model is loaded when they are too few for the run — then filtered
    with ``cfg.filter``, on threads or on Dask as ``cfg`` says."""
    check_enough_pairs(data_root, where, cfg.largest_batch, cfg.train.heldout_pairs, cfg.train.validation_pairs)
    distributed = cfg.dask_address is not None or cfg.workers > 1
    return filter_flow.with_options(task_runner=task_runner(cfg.workers, cfg.dask_address))(
        data_root, cfg.filter, data_root, concurrency=None if distributed else 1)
