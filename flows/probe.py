"""The invented-term probe: a retrieval task about a word no model has seen, every model scored on it."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.evaluate import eval_flow
from mosaic_core.config import EvalConfig
from mosaic_core.eval_tasks import BeirTask
from tasks.corpora import probe_activation, write_probe


@flow(name="probe")
def probe_flow(models: dict[str, str], word: str, out_dir: str) -> dict:
    """The invented-term probe for ``word`` written to ``out_dir`` and every model scored on it."""
    probe = write_probe(word, out_dir)
    cfg = EvalConfig(tasks=(BeirTask(name=f"invented-{probe['word']}", path=probe["task"]),))
    return {**probe, **eval_flow(models, cfg, str(Path(out_dir) / "report")),
            "activation": probe_activation(models, probe["word"])}
