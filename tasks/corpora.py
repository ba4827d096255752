"""Prefect tasks that write derived corpora: the Islamic verse-pair candidates and the
invented-term probe."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from mosaic_core.data.islamic import read_quran, tafsir_candidates
from mosaic_core.evaluate.probe import make_probe
from storage.benchmarks import write_beir
from storage.pairs_io import write_jsonl

log = logging.getLogger(__name__)


@task(name="islamic-candidates", cache_policy=NO_CACHE)
def islamic_candidates(quran: str, tafsir: str, out_path: str) -> dict:
    """Write the Tafsir-linked verse pairs to ``out_path`` (JSONL query/document); returns the
    counts (blocks, references, invalid ones, self-links, duplicates, candidates)."""
    pairs, stats = tafsir_candidates(Path(tafsir), read_quran(Path(quran)))
    write_jsonl(Path(out_path), pairs)
    log.info("islamic candidates: %d from %d tafsir blocks -> %s", stats.candidates, stats.blocks, out_path)
    return asdict(stats)


@task(name="write-probe", cache_policy=NO_CACHE)
def write_probe(word: str, out_dir: str) -> dict:
    """Write the invented-term probe for ``word``: its adaptation pairs and its BEIR task."""
    data = make_probe(word)
    out = Path(out_dir)
    write_jsonl(out / "adaptation_pairs.jsonl", data.train_pairs)
    folder = write_beir(out / "probe", data.corpus, data.queries, data.qrels)
    return {"word": data.word, "task": str(folder), "adaptation_pairs": str(out / "adaptation_pairs.jsonl")}


@task(name="probe-activation", cache_policy=NO_CACHE)
def probe_activation(models: dict[str, str], word: str) -> dict:
    """For every sparse (SPLADE) model of ``models``: the invented word's weight where the probe
    names it and in its queries, which only describe it (dense models have no such weight)."""
    from mosaic_core.evaluate.probe import sparse_activation
    from mosaic_core.modeling.refs import resolve_model
    from mosaic_core.modeling.sparse import is_sparse_model, sparse_encoder

    data = make_probe(word)
    resolved = {name: resolve_model(path) for name, path in models.items()}
    return {name: sparse_activation(sparse_encoder(path), data) for name, path in resolved.items()
            if is_sparse_model(path)}
