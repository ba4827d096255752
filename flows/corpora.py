"""Flows that build derived corpora and score them: the Islamic recipe and the invented-term probe."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.evaluate import eval_flow
from flows.filter import filter_flow
from mosaic_core.config import EvalConfig, FilterConfig
from mosaic_core.eval_tasks import BeirTask
from storage.lock import root_lock
from tasks.corpora import islamic_candidates, probe_activation, write_probe
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


@flow(name="probe")
def probe_flow(models: dict[str, str], word: str, out_dir: str) -> dict:
    """The invented-term probe for ``word`` written to ``out_dir`` and every model scored on it."""
    probe = write_probe(word, out_dir)
    cfg = EvalConfig(tasks=(BeirTask(name=f"invented-{probe['word']}", path=probe["task"]),))
    return {**probe, **eval_flow(models, cfg, str(Path(out_dir) / "report")),
            "activation": probe_activation(models, probe["word"])}
