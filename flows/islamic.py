"""The Islamic source (the low-resource recipe): verse pairs linked by Tafsir cross-references,
threshold-filtered into the data root like any pairs file."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.filter import filter_flow
from mosaic_core.config import FilterConfig, IslamicSource, PipelineConfig
from storage.lock import root_lock
from storage.manifest import Manifest
from tasks.corpora import islamic_candidates
from tasks.filter import dropped_examples, score_report


@flow(name="islamic-pairs")
def islamic_pairs_flow(quran: str, tafsir: str, cfg: FilterConfig, data_root: str) -> dict:
    """Verse pairs linked by Tafsir cross-references (``DATA_ROOT/islamic_candidates.jsonl``),
    threshold-filtered into ``data_root`` like any pairs file."""
    with root_lock(data_root, "islamic-pairs flow"):
        candidates = str(Path(data_root) / "islamic_candidates.jsonl")
        stats = islamic_candidates(quran, tafsir, candidates)
        (manifest,) = filter_flow(candidates, cfg, data_root)
        return {"stats": stats, "manifest": manifest, "scores": score_report(data_root),
                "dropped": dropped_examples(data_root, 5)}


def islamic_pairs(source: IslamicSource, cfg: PipelineConfig, data_root: str) -> tuple[list[Manifest], list[Manifest]]:
    """(no ingest manifests, the filter's) of the verse pairs ``source`` builds, scored by ``cfg.filter.model``."""
    pairs = islamic_pairs_flow(source.quran, source.tafsir, source.filter_config(cfg.filter.model), data_root)
    return [], [pairs["manifest"]]
