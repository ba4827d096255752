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
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from prefect import Task, task
from prefect.context import TaskRunContext

from mosaic_core import gradcache, losses, model, train
from mosaic_core.config import StageConfig, TrainConfig
from mosaic_core.fingerprint import model_fingerprint
from mosaic_core.models import resolve_model
from mosaic_core.versioning import code_version
from storage.pairs_io import corpus_fingerprint, read_pairs
from tasks.keys import cache_key

log = logging.getLogger(__name__)
CODE_VERSION = code_version(train, gradcache, losses, model)
FAIL_ENV = "MOSAIC_FAIL_STAGE_AT_STEP"
"""Test hook: ``NAME:STEP`` makes stage NAME fail after optimizer step STEP (crash/resume drills)."""


def stage_fingerprint(input_model: str, pairs_source: str, stage: StageConfig, cfg: TrainConfig, out_dir: str) -> str:
    data = cfg.model_copy(update={"stages": (stage,)}).config_hash()  # held-out split and columns, not siblings
    return cache_key("train", model_fingerprint(resolve_model(input_model)), corpus_fingerprint(pairs_source),
                     stage.config_hash(), data, CODE_VERSION, str(Path(out_dir).resolve()))


def _stage_cache_key(context: TaskRunContext, parameters: dict) -> str:
    return stage_fingerprint(parameters["input_model"], parameters["pairs_source"], parameters["stage"],
                             parameters["cfg"], parameters["out_dir"])


def injected_failure(stage: str) -> int | None:
    name, _, step = os.environ.get(FAIL_ENV, "").partition(":")
    return int(step) if name == stage and step else None


def load_split(pairs_source: str, cfg: TrainConfig) -> tuple[list, list]:
    pairs, _ = read_pairs(pairs_source, cfg.query_column, cfg.document_column)
    return train.split_heldout(pairs, cfg.heldout_pairs)


def default_processes() -> int:
    return max(1, torch.cuda.device_count())


@task(name="train-stage", task_run_name="train-{stage.name}", cache_key_fn=_stage_cache_key,
      persist_result=True, retries=0)
def train_stage_task(input_model: str, pairs_source: str, stage: StageConfig, cfg: TrainConfig, out_dir: str,
                     processes: int = 1) -> dict:
    """Train one stage from ``input_model`` into ``out_dir``; returns the stage result (a dict)."""
    fingerprint = stage_fingerprint(input_model, pairs_source, stage, cfg, out_dir)
    if processes > 1:
        return _launch(input_model, pairs_source, stage, cfg, out_dir, processes, fingerprint)
    pairs, heldout = load_split(pairs_source, cfg)
    log.info("stage %s: %d training pairs, %d held out, from %s", stage.name, len(pairs), len(heldout), input_model)
    result = train.train_stage(input_model, pairs, stage, Path(out_dir), heldout, fingerprint,
                               fail_at_step=injected_failure(stage.name))
    return asdict(result)


def _launch(input_model: str, pairs_source: str, stage: StageConfig, cfg: TrainConfig, out_dir: str,
            processes: int, fingerprint: str) -> dict:
    """Run the stage on ``processes`` ranks through ``torchrun`` and return rank 0's result."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "launch.json"
    spec.write_text(json.dumps({"input_model": input_model, "pairs_source": pairs_source,
                                "stage": stage.model_dump(mode="json"), "cfg": cfg.model_dump(mode="json"),
                                "out_dir": out_dir, "fingerprint": fingerprint,
                                "fail_at_step": injected_failure(stage.name)}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
           "-m", "tasks.train_worker", str(spec)]
    log.info("stage %s: launching %d ranks: %s", stage.name, processes, " ".join(cmd))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"stage {stage.name}: torchrun exited with {done.returncode}; last output:\n"
                           + (done.stdout + done.stderr)[-4000:])
    return json.loads((out / "stage.json").read_text())["result"]


def train_stage_for(out_dir: str) -> Task:
    """``train_stage_task``, bypassing Prefect's cache when the stage's model is gone."""
    return train_stage_task.with_options(refresh_cache=not (Path(out_dir) / "stage.json").exists())
