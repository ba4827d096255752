"""What a training stage reports to TensorBoard (:mod:`mosaic_core.modeling.tracking`): every
log record of the loop (``train_log.jsonl``) as tagged scalars at its step — each loss term,
the learning rate(s), the gradient norm, pairs/s and tokens/s, GPU memory on CUDA, validation
retrieval at each evaluation — and the domain-MLM term beside its frequency baseline."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

import torch

from mosaic_core.modeling.tracking import Tracker, open_tracker

MLM_BASELINE = "loss/mlm_frequency_baseline"
"""The cross-entropy of predicting each masked domain token from its corpus frequency alone: an
MLM curve that stays above it has learnt nothing from the context."""
LAYOUT = {"MOSAIC": {"domain MLM vs its frequency baseline": ["Multiline", ["loss/mlm", MLM_BASELINE]],
                     "losses": ["Multiline", [r"loss/.*"]]}}
_NOT_LOSSES = {"step", "lr", "lrs", "total_steps", "eval", "grad_norm", "pairs_per_s", "tokens_per_s"}


def record_scalars(record: Mapping[str, object]) -> dict[str, float]:
    """One loop record → ``{tag: value}``. Every number that is not a known rate, count or
    memory reading is a loss term (``loss/<term>``), so a new term needs no change here."""
    out: dict[str, float] = {}
    for key, value in record.items():
        if key == "eval" and isinstance(value, Mapping):
            out.update({f"val/{k}": float(v) for k, v in value.items() if k not in ("step", "n")})
        elif key == "lrs":
            out.update({f"train/lr_group{i}": float(v) for i, v in enumerate(value)})
        elif key in ("lr", "grad_norm"):
            out[f"train/{key}"] = float(value)
        elif key in ("pairs_per_s", "tokens_per_s"):
            out[f"speed/{key}"] = float(value)
        elif key.startswith("gpu_"):
            out[f"gpu/{key[4:]}"] = float(value)
        elif key not in _NOT_LOSSES and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"loss/{key}"] = float(value)
    return out


class StageTracker:
    """The loop's ``on_record`` callback for one stage (rank 0): scalars to ``tracker`` but the
    loss terms in ``off`` (those the stage does not compute: always 0), the frequency baseline
    (when the stage has a domain-MLM term) at every record that holds the term."""

    def __init__(self, tracker: Tracker, mlm_baseline: float | None = None, off: Collection[str] = ()):
        self.tracker, self.mlm_baseline, self.off = tracker, mlm_baseline, {f"loss/{t}" for t in off}

    def __call__(self, record: dict) -> None:
        values = {k: v for k, v in record_scalars(record).items() if k not in self.off}
        if self.mlm_baseline is not None and "loss/mlm" in values:
            values[MLM_BASELINE] = self.mlm_baseline
        self.tracker.scalars(values, int(record["step"]))

    def close(self) -> None:
        self.tracker.close()


def stage_tracker(out_dir: Path, config: Mapping[str, object], resumed_from: int | None,
                  mlm_baseline: float | None, off: Collection[str] = ()) -> StageTracker:
    """A stage's tracker writing to ``out_dir/tb``, its config recorded as parameters."""
    tracker = open_tracker(out_dir, resumed_from, LAYOUT)
    tracker.params(config)
    return StageTracker(tracker, mlm_baseline, off)


class TokenCounter:
    """The loop's batches, counting their tokens (attention-mask ones: queries, documents,
    negatives) as the loop draws them, in the loop's thread (the batches are on the CPU then)."""

    def __init__(self, batches: Iterator[dict]):
        self.batches, self.tokens = batches, 0

    def __iter__(self) -> TokenCounter:
        return self

    def __next__(self) -> dict:
        batch = next(self.batches)
        self.tokens += sum(int(v.sum()) for k, v in batch.items() if k.endswith("_mask"))
        return batch

    def take(self) -> int:
        """The tokens drawn since the last call."""
        n, self.tokens = self.tokens, 0
        return n

    def close(self) -> None:
        self.batches.close()


def gpu_memory(device: torch.device) -> dict[str, float]:
    """GiB allocated now and at the peak since the last call, on a CUDA device (else nothing)."""
    if device.type != "cuda":
        return {}
    out = {"gpu_allocated_gib": torch.cuda.memory_allocated(device) / 2**30,
           "gpu_peak_gib": torch.cuda.max_memory_allocated(device) / 2**30}
    torch.cuda.reset_peak_memory_stats(device)
    return out
