"""One training state, saved and restored by one pair of functions; resume is exact.

A checkpoint holds the model, optimizer and scheduler state, the step, the RNG states, the
window of the last ``log_every`` steps' losses (the warm-up's stop rule reads it), the
evaluations so far and the best one. The data order and the masks are functions of (seed,
step), so a resumed run takes the same batches as an uninterrupted one. Everything in a
checkpoint is tensors and plain values, loaded with ``weights_only=True``: loading one never
runs code from the file.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mosaic_core.files import remove, replacing, temporary_path
from mosaic_core.trainer.build import TrainParts

log = logging.getLogger(__name__)
STATE_FILE = "state.pt"
BEST_DIR, BEST_FILE = "best", "model.pt"


@dataclass
class Best:
    """The kept evaluation so far: its step and score (by the metric the stage keeps its best
    model on; see :func:`mosaic_core.trainer.loop.StepLoop.evaluate`)."""

    step: int
    score: float


@dataclass
class TrainState:
    step: int = 0
    window: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    best: Best | None = None
    resumed_from: int | None = None


def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoints(ckpt_dir: Path) -> list[Path]:
    return sorted(ckpt_dir.glob("step-*"), key=lambda p: int(p.name.split("-")[1]))


def _plain(window: list[dict]) -> list[dict]:
    """The window's values as floats (read from the device once, at checkpoint time)."""
    return [{k: float(v) for k, v in w.items()} for w in window]


def save_state(ckpt_dir: Path, parts: TrainParts, state: TrainState, fingerprint: str, keep: int = 2) -> Path:
    """``ckpt_dir/step-N/state.pt``, written under a temporary name and renamed, so a crash
    mid-write never leaves half a checkpoint; older ones beyond ``keep`` are removed."""
    final = ckpt_dir / f"step-{state.step:08d}"
    tmp = temporary_path(final)
    try:
        tmp.mkdir(parents=True)
        torch.save({"fingerprint": fingerprint, "step": state.step, "model": parts.model.state_dict(),
                    "optimizer": parts.optimizer.state_dict(), "scheduler": parts.scheduler.state_dict(),
                    "rng": _rng_state(), "window": _plain(state.window), "evals": state.evals,
                    "best": None if state.best is None else [state.best.step, state.best.score]}, tmp / STATE_FILE)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    except BaseException:
        remove(tmp)
        raise
    for old in checkpoints(ckpt_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_state(ckpt_dir: Path, parts: TrainParts, fingerprint: str) -> TrainState | None:
    """Restore ``parts`` from the newest checkpoint written for ``fingerprint`` (stage config +
    inputs) and return its state; ``None`` (nothing restored) when there is none."""
    for path in reversed(checkpoints(ckpt_dir)):
        saved = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)
        if saved.get("fingerprint") != fingerprint:
            log.warning("ignoring checkpoint %s: written for other inputs or another stage config", path)
            continue
        parts.model.load_state_dict(saved["model"])
        parts.optimizer.load_state_dict(saved["optimizer"])
        parts.scheduler.load_state_dict(saved["scheduler"])
        _set_rng_state(saved["rng"])
        best = Best(*saved["best"]) if saved["best"] is not None else None
        return TrainState(saved["step"], saved["window"], saved["evals"], best, resumed_from=saved["step"])
    return None


def save_best(ckpt_dir: Path, parts: TrainParts, best: Best) -> None:
    """Keep the model (weights and head) of the best evaluation so far beside the checkpoints."""
    path = ckpt_dir / BEST_DIR / BEST_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        torch.save({"step": best.step, "score": best.score,
                    "model": {k: v.detach().cpu() for k, v in parts.model.state_dict().items()}}, tmp)


def restore_best(ckpt_dir: Path, parts: TrainParts, best: Best) -> None:
    """Load the kept best model into ``parts.model``."""
    saved = torch.load(ckpt_dir / BEST_DIR / BEST_FILE, map_location="cpu", weights_only=True)
    if saved["step"] != best.step:
        raise RuntimeError(f"{ckpt_dir / BEST_DIR} holds step {saved['step']}, not the best step {best.step}")
    parts.model.load_state_dict(saved["model"])
