"""Prefect task of the built-in demo: generate its snapshot and task into the data root."""

from __future__ import annotations

import logging

from prefect import task
from prefect.cache_policies import NO_CACHE

from mosaic_core.data.demo import make_demo
from storage.demo import write_demo
from storage.layout import DataLayout

log = logging.getLogger(__name__)


@task(name="generate-demo", cache_policy=NO_CACHE)
def generate_demo(data_root: str, seed: int = 0) -> dict[str, str]:
    """Write the demo domain of ``seed`` under ``data_root/demo``; returns its snapshot and task
    folders and its glossary file. Deterministic and idempotent: files whose bytes are unchanged are not rewritten."""
    data = make_demo(seed)
    snapshot, task_dir, glossary = write_demo(DataLayout(data_root), data.files, data.corpus, data.queries,
                                              data.qrels, data.glossary)
    log.info("demo (seed %d): %d invented words, snapshot %s, task %s (%d queries), glossary %s", seed,
             len(data.terms), snapshot, task_dir, len(data.queries), glossary)
    return {"source": str(snapshot), "task": str(task_dir), "glossary": str(glossary)}
