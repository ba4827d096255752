"""Prefect tasks of evaluation: load a task's data (local files or mteb's hub data), score one
(model, task), cached on (model checksum, task data checksum, code version)."""

from __future__ import annotations

import dataclasses
import json
import logging
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from mosaic_core.eval_tasks import EvalTask
from mosaic_core.evaluate import scoring as evaluation
from mosaic_core.evaluate.report import write_report
from mosaic_core.evaluate.scoring import TaskScore
from mosaic_core.evaluate.task_readers import task_readers
from mosaic_core.modeling import card
from mosaic_core.modeling.fingerprint import model_fingerprint
from mosaic_core.modeling.modeldir import MODEL_CARD, read_stage_record, read_vocab_report, write_card
from mosaic_core.modeling.refs import resolve_model
from mosaic_core.versioning import code_version
from storage.benchmarks import read_beir, read_sts
from storage.history import record_evaluation
from storage.layout import DataLayout
from storage.pairs_io import corpus_fingerprint, pair_batches
from storage.vectors import TaskVectors, keep_models
from tasks.heldout import recorded_split
from tasks.keys import cache_key
from tasks.results import SERIALIZER, json_only

log = logging.getLogger(__name__)
CODE_VERSION = code_version(evaluation)
ENCODING = f"{CODE_VERSION} " + " ".join(f"{p}={version(p)}" for p in ("mteb", "sentence-transformers", "torch",
                                                                         "transformers"))
"""What encodes a text besides the model and its settings: the scoring code and the libraries (an
embedding cache folder's name digests it)."""
READERS = task_readers(read_beir=read_beir, read_sts=read_sts, pair_batches=pair_batches,
                       corpus_fingerprint=corpus_fingerprint, recorded_split=recorded_split)
"""What every evaluation task kind reads and builds with: storage's file readers, the evaluation's builders."""


def task_checksum(spec: EvalTask) -> str:
    """What a task's scores depend on besides the model: its data and definition."""
    return spec.checksum(READERS)


def load_task(spec: EvalTask):
    """The mteb task object of ``spec`` with its data in memory; raises TaskUnavailable/BenchmarkError.

    Loaded once per process and data checksum: the flow's up-front check and every model's
    evaluation share one load (a held-out task reads the whole pairs source), and a changed
    file is read again."""
    return _load_task(spec, task_checksum(spec))


@lru_cache(maxsize=16)
def _load_task(spec: EvalTask, checksum: str):
    return spec.load(READERS)


@task(name="evaluation-report", cache_policy=NO_CACHE)
def report_task(scores: dict[str, list[TaskScore]], out_dir: str, metadata: dict, notes: list[str]) -> dict[str, Path]:
    """The comparison report (Markdown, HTML, charts, results.json) in ``out_dir``."""
    return write_report(scores, Path(out_dir), metadata, notes)


@task(name="record-history", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=1)
def record_history(data_root: str, run_id: str, evaluation_id: str, records: list[dict]) -> None:
    """Record one evaluation's scores in ``data_root``'s catalog (``mosaic history``), as rows of
    run ``run_id`` (a pipeline run's id, which its publish decision bears too)."""
    record_evaluation(DataLayout(data_root), run_id, records, evaluation_id)


@task(name="model-cards", cache_policy=NO_CACHE)
def write_model_cards(models: dict[str, str], scores: dict[str, list[dict]], base: str, domain: str,
                      control: str | None = None) -> list[str]:
    """Rewrite the card of every MOSAIC-made model among ``models`` with its scores next to the
    ``base`` model's (and the ``control``'s, when the run trained one); returns the cards written."""
    by_model = {m: {s["task"]: s for s in ss} for m, ss in scores.items()}
    written = []
    for name, path in models.items():
        resolved = Path(resolve_model(path))
        if name == base or not (read_vocab_report(resolved) or read_stage_record(resolved)):
            continue
        mine = {t: {"metric": s["metric"], "value": s["value"], "dim": s.get("dim"),
                    "base": by_model.get(base, {}).get(t, {}).get("value"),
                    **({"control": by_model.get(control, {}).get(t, {}).get("value")}
                       if control and name != control else {})} for t, s in by_model.get(name, {}).items()}
        write_card(resolved, card.render(card.facts(str(resolved), domain, mine)))
        written.append(str(resolved / MODEL_CARD))
    return written


@task(name="prune-vectors", cache_policy=NO_CACHE)
def prune_vectors(data_root: str, folders: list[str]) -> list[str]:
    """The data root's embedding cache keeps the model folders ``folders`` alone (:func:`keep_models`)."""
    gone = keep_models(data_root, [Path(f) for f in folders])
    if gone:
        log.info("embedding cache: %d model folders no run scores any more removed", len(gone))
    return gone


@json_only
def _eval_cache_key(context: TaskRunContext, parameters: dict) -> str:
    return cache_key("eval", model_fingerprint(resolve_model(parameters["model_path"])),
                     task_checksum(parameters["spec"]), CODE_VERSION, str(parameters["batch_size"]),
                     parameters["model_kind"], json.dumps(parameters.get("prompts"), sort_keys=True),
                     *([f"dim{parameters['dim']}"] if parameters.get("dim") is not None else []))


@task(name="evaluate", task_run_name="eval-{model_name}-{spec.name}", cache_key_fn=_eval_cache_key,
      persist_result=True, result_serializer=SERIALIZER, retries=0)
def evaluate_task(model_name: str, model_path: str, spec: EvalTask, work_dir: str, batch_size: int = 64,
                  model_kind: str = "auto", prompts: dict | None = None, dim: int | None = None,
                  vectors: str | None = None) -> dict:
    """Score ``model_path`` on ``spec``; returns the TaskScore as a dict (with per-query NDCG@10).
    ``prompts``: the query and document prompts (None: what the model declares). ``dim``: the
    embeddings cut to that many dimensions (renormalised); the score is then named TASK@DIM.
    ``vectors``: the model's folder of the data root's embedding cache (:mod:`storage.vectors`):
    only the texts it holds no vector for are encoded."""
    score = evaluation.score_task(resolve_model(model_path), load_task(spec), Path(work_dir), batch_size, model_kind,
                                  prompts=prompts, dim=dim, vectors=vectors and (Path(vectors), TaskVectors))
    score.task = spec.name if dim is None else f"{spec.name}@{dim}"
    log.info("%s on %s: %s = %.4f", model_name, spec.name, score.metric, score.value)
    return dataclasses.asdict(score)
