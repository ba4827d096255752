"""Prefect task of one training stage (stages 2–3 and the MLM warm-up).

Cached on (input model checksum, training-data checksum, stage config, code version, output
directory); ``retries=0`` because a rerun resumes from the stage's last checkpoint instead of
starting over. With more than one process (default: one per visible GPU) the stage is launched
through ``torchrun``; each rank runs :mod:`tasks.train_worker`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
from prefect import task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.context import TaskRunContext

from mosaic_core.config import StageConfig, TrainConfig
from mosaic_core.modeling.card import facts, render
from mosaic_core.modeling.dual_encoder import ships_mlm_head
from mosaic_core.modeling.fingerprint import model_fingerprint
from mosaic_core.modeling.losses import LOSS_TERMS
from mosaic_core.modeling.modeldir import is_complete_stage, read_stage_record, write_card, write_stage_record
from mosaic_core.modeling.refs import resolve_model
from mosaic_core.trainer import Hooks, PairSet, fail_after, merge
from mosaic_core.trainer import stage as trainer_stage
from mosaic_core.trainer.heldout import SELECT_METRIC, RetrievalProbe, split_examples
from mosaic_core.versioning import code_version
from storage.examples import examples_file, map_examples, read_batches
from storage.pairs_io import corpus_fingerprint
from tasks.heldout import recorded_split
from tasks.keys import cache_key
from tasks.results import SERIALIZER, json_only, results_beside, verified

log = logging.getLogger(__name__)
CODE_VERSION = code_version(trainer_stage)  # and all it imports (mosaic_core/versioning.py)
FAIL_ENV = "MOSAIC_FAIL_STAGE_AT_STEP"
"""Test hook: ``NAME:STEP`` makes stage NAME fail after optimizer step STEP (crash/resume drills)."""


def stage_fingerprint(input_model: str, pairs_source: str, stage: StageConfig, cfg: TrainConfig, out_dir: str) -> str:
    data = cfg.model_copy(update={"stages": (stage,), "dictionary": None}).config_hash()  # split, columns: no sibling
    extra = [corpus_fingerprint(cfg.extra_pairs)] if cfg.extra_pairs and stage.pairs is None else []
    return cache_key("train", model_fingerprint(resolve_model(input_model)), corpus_fingerprint(pairs_source),
                     stage.config_hash(), data, CODE_VERSION, str(Path(out_dir).resolve()), *extra)


@json_only
def _stage_cache_key(context: TaskRunContext, parameters: dict) -> str:
    return stage_fingerprint(parameters["input_model"], parameters["pairs_source"], parameters["stage"],
                             parameters["cfg"], parameters["out_dir"])


def injected_failure(stage: str) -> int | None:
    name, _, step = os.environ.get(FAIL_ENV, "").partition(":")
    return int(step) if name == stage and step else None


class LiveProgress:
    """A Prefect progress artifact of a running stage, updated at every log record: the UI shows
    step/total, the losses and pairs/s while the stage runs (outside a Prefect run: nothing)."""

    def __init__(self, stage: StageConfig):
        self.stage, self.artifact = stage, None

    def __call__(self, record: dict) -> None:
        if TaskRunContext.get() is None:
            return
        done = 100 * record["step"] / max(record.get("total_steps", record["step"]), 1)
        terms = ", ".join(f"{k} {record[k]:.4f}" for k in ("total", *LOSS_TERMS) if record.get(k))
        score = record.get("eval", {}).get(SELECT_METRIC)
        text = (f"stage {self.stage.name}: step {record['step']}/{record.get('total_steps', '?')}; {terms}; "
                f"{record.get('pairs_per_s', 0):.1f} pairs/s"
                + (f"; validation NDCG@10 {score:.4f}" if score is not None else ""))
        if self.artifact is None:
            key = "train-" + re.sub(r"[^a-z0-9-]", "-", self.stage.name.lower())  # the UI's allowed characters
            self.artifact = create_progress_artifact(done, key=key, description=text)
        else:
            update_progress_artifact(self.artifact, done, description=text)


def stage_hooks(stage: StageConfig) -> Hooks:
    """The loop's callbacks: live progress in the Prefect UI, and a failure drill when
    ``MOSAIC_FAIL_STAGE_AT_STEP`` names this stage."""
    step = injected_failure(stage.name)
    return Hooks(on_record=LiveProgress(stage), after_step=[fail_after(step)] if step is not None else [],
                 progress=True)


def load_split(pairs_source: str, cfg: TrainConfig, stage: StageConfig, work_dir: str,
               ) -> tuple[PairSet, RetrievalProbe | None]:
    """(training examples of ``stage``, validation retrieval), read from the source's examples
    file (memory-mapped; a pairs file is converted once into ``work_dir``): the test and
    validation pairs (by content hash, as the source's data root recorded them:
    :mod:`mosaic_core.trainer.heldout`) are kept out of training, their documents out of the
    training pairs' hard negatives too. A stage on the run's pairs also trains on
    ``cfg.extra_pairs`` (a glossary's definition pairs), never held out."""
    path = examples_file(pairs_source, *cfg.columns_for(stage), Path(work_dir))
    train, validation = split_examples(PairSet(map_examples(path)), lambda: read_batches(path), cfg.heldout_pairs,
                                       cfg.validation_pairs, cfg.validation_pool,
                                       recorded_split(pairs_source, cfg.heldout_pairs, cfg.validation_pairs))
    if cfg.extra_pairs and stage.pairs is None:  # a glossary's definition pairs: training pairs only
        train = train.joined(PairSet(map_examples(examples_file(cfg.extra_pairs, "query", "document",
                                                                Path(work_dir)))))
    return train, validation


def with_warmup(cfg: TrainConfig, input_model: str) -> TrainConfig:
    """``cfg`` with the MLM warm-up that ``input_model`` needs (:meth:`TrainConfig.with_warmup`:
    a head-only warm-up before a joint first stage when the model ships no MLM head), said in the log."""
    if not cfg.may_warm_up:
        return cfg  # nothing to decide: the model is not loaded
    out = cfg.with_warmup(ships_mlm_head(input_model))
    if out is not cfg:
        warmup = out.stages[0]
        cap = f"{warmup.max_steps} steps" if warmup.max_steps else f"{warmup.epochs} passes"
        log.info("%s ships no MLM head: stage %s trains one (the head alone, at most %s, until its target) before "
                 "stage %s (train.mlm_warmup: off leaves it out; train.mlm_warmup_steps caps it)", input_model,
                 warmup.name, cap, cfg.stages[0].name)
    return out


def default_processes() -> int:
    return max(1, torch.cuda.device_count())


def _stage_output(p: dict) -> tuple[Path | None, bool]:
    return results_beside(p["out_dir"]), is_complete_stage(p["out_dir"])


@verified(_stage_output)
@task(name="train-stage", task_run_name="train-{stage.name}", cache_key_fn=_stage_cache_key,
      persist_result=True, result_serializer=SERIALIZER, retries=0)
def train_stage_task(input_model: str, pairs_source: str, stage: StageConfig, cfg: TrainConfig, out_dir: str,
                     examples_dir: str, processes: int = 1) -> dict:
    """Train one stage from ``input_model`` into ``out_dir``; returns the stage result (a dict).
    A pairs file is read through its examples file in ``examples_dir`` (:func:`load_split`)."""
    fingerprint = stage_fingerprint(input_model, pairs_source, stage, cfg, out_dir)
    if processes > 1:
        examples_file(pairs_source, *cfg.columns_for(stage), Path(examples_dir))  # converted once, not by every rank
        return _launch(input_model, pairs_source, stage, cfg, out_dir, examples_dir, processes, fingerprint)
    data, validation = load_split(pairs_source, cfg, stage, examples_dir)
    log.info("stage %s: %d training pairs, %d validation queries, from %s", stage.name, len(data),
             len(validation.queries) if validation else 0, input_model)
    result = trainer_stage.train_stage(input_model, data, stage, Path(out_dir), validation, fingerprint,
                                       stage_hooks(stage))
    return asdict(result)


def _launch(input_model: str, pairs_source: str, stage: StageConfig, cfg: TrainConfig, out_dir: str,
            examples_dir: str, processes: int, fingerprint: str) -> dict:
    """Run the stage on ``processes`` ranks through ``torchrun`` and return rank 0's result."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "launch.json"
    spec.write_text(json.dumps({"input_model": input_model, "pairs_source": pairs_source,
                                "stage": stage.model_dump(mode="json"), "cfg": cfg.model_dump(mode="json"),
                                "out_dir": out_dir, "examples_dir": examples_dir, "fingerprint": fingerprint}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
           "-m", "tasks.train_worker", str(spec)]
    log.info("stage %s: launching %d ranks: %s", stage.name, processes, " ".join(cmd))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"stage {stage.name}: torchrun exited with {done.returncode}; last output:\n"
                           + (done.stdout + done.stderr)[-4000:])
    return read_stage_record(out)["result"]


@json_only
def _merge_cache_key(context: TaskRunContext, p: dict) -> str:
    cfg: TrainConfig = p["cfg"]
    return cache_key("merge", model_fingerprint(resolve_model(p["start_model"])),
                     model_fingerprint(resolve_model(p["end_model"])), corpus_fingerprint(p["pairs_source"]),
                     cfg.config_hash(), code_version(merge), str(Path(p["out_dir"]).resolve()))


@verified(_stage_output)
@task(name="merge", cache_key_fn=_merge_cache_key, persist_result=True, result_serializer=SERIALIZER, retries=0)
def merge_task(start_model: str, end_model: str, pairs_source: str, cfg: TrainConfig, out_dir: str,
               examples_dir: str) -> dict:
    """WiSE-FT: the interpolation of ``start_model`` and ``end_model`` with the best validation
    NDCG@10 among ``cfg.merge_weights`` and 1.0 (the end model), written to ``out_dir``; returns a
    stage-like result (``merge_weight``, every weight's validation scores in ``evals``)."""
    t0 = time.perf_counter()
    last = cfg.stages[-1]
    _, validation = load_split(pairs_source, cfg, last, examples_dir)
    out = Path(out_dir)
    weight, scores = merge.choose_weight(start_model, end_model, validation, (*cfg.merge_weights, 1.0),
                                         out / "candidates", last.query_max_length, last.document_max_length)
    chosen = resolve_model(end_model) if weight == 1.0 else str(out / "candidates" / f"w{weight:g}")
    shutil.copytree(chosen, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("candidates", "stage.json"))
    shutil.rmtree(out / "candidates", ignore_errors=True)
    result = {"stage": "merge", "out_dir": out_dir, "steps": 0, "pairs": 0, "seconds": time.perf_counter() - t0,
              "resumed_from": None, "final": {}, "evals": [{"step": 0, **s} for s in scores],
              "merge_weight": weight, "best_step": None}
    write_stage_record(out, {"config": {"merge_weights": list(cfg.merge_weights)}, "input_model": end_model,
                             "start_model": start_model, "result": result})
    write_card(out, render(facts(out_dir, "its domain corpus")))
    log.info("merge: weight %.2f of the last stage (validation NDCG@10 %s)", weight,
             ", ".join(f"{s['weight']:g}: {s['ndcg@10']:.4f}" for s in scores))
    return result

