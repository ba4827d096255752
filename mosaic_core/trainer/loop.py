"""The step loop of a stage, readable top to bottom: accumulate, clip, step, log, evaluate,
checkpoint. Loss values stay on the device until a log record needs them."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from mosaic_core.config import StageConfig
from mosaic_core.modeling.dual_encoder import DualEncoder
from mosaic_core.modeling.losses import loss_terms
from mosaic_core.trainer.build import TrainParts
from mosaic_core.trainer.data import PairSet, prefetched
from mosaic_core.trainer.gradcache import joint_backward, mlm_backward
from mosaic_core.trainer.heldout import SELECT_METRIC
from mosaic_core.trainer.state import Best, TrainState, save_best, save_state
from mosaic_core.trainer.tracking import TokenCounter, gpu_memory

log = logging.getLogger(__name__)


class InjectedFailure(RuntimeError):
    """Raised by a failure-injection callback, as a crash would interrupt a stage."""


def fail_after(step: int) -> Callable[[int], None]:
    """A callback that fails the stage right after optimizer step ``step`` (crash/resume drills)."""
    def check(done: int) -> None:
        if done == step:
            raise InjectedFailure(f"injected failure after step {step}")
    return check


@dataclass
class Hooks:
    """What the loop calls out to: ``evaluate(model) -> metrics`` (rank 0), ``on_record(record)``
    for every log record (e.g. a live progress view), ``after_step(step)`` callbacks."""

    evaluate: Callable[[DualEncoder], dict] | None = None
    on_record: Callable[[dict], None] | None = None
    after_step: list[Callable[[int], None]] = field(default_factory=list)
    progress: bool = True


def train_step(parts: TrainParts, batches, stage: StageConfig) -> dict[str, torch.Tensor]:
    """One optimizer step over ``stage.accumulation`` batches; the losses as 0-d device tensors."""
    losses: dict[str, torch.Tensor] = {}
    use_mlm = stage.kind == "joint" and stage.alpha > 0
    for micro in range(stage.accumulation):
        batch = {k: v.to(parts.device, non_blocking=True) for k, v in next(batches).items()}
        sync = micro == stage.accumulation - 1  # ranks reduce gradients once per step, in the last pass
        with torch.autocast(parts.device.type, dtype=parts.dtype or torch.float32, enabled=parts.dtype is not None):
            if stage.kind == "mlm":
                terms = mlm_backward(parts.net, batch, parts.mlm_domain, parts.chunk, sync)
            else:
                terms = joint_backward(parts.net, batch, parts.loss_fn, parts.mlm_domain, parts.chunk, use_mlm, sync)
        for k, v in terms.items():
            losses[k] = losses.get(k, 0) + v / stage.accumulation
    if stage.accumulation > 1:
        for p in parts.params:
            if p.grad is not None:
                p.grad /= stage.accumulation
    grad_norm = torch.nn.utils.clip_grad_norm_(parts.params, stage.max_grad_norm)
    parts.optimizer.step()
    parts.scheduler.step()
    parts.optimizer.zero_grad(set_to_none=True)
    return {**losses, "grad_norm": grad_norm.detach()}


def window_means(window: list[dict]) -> dict[str, float]:
    """Each logged quantity averaged over the window's steps (read from the device here)."""
    return {k: sum(float(w[k]) for w in window) / len(window) for k in window[0]}


def mlm_window_mean(window: list[dict], world: int) -> float:
    """Mean MLM loss over the window, averaged across ranks so every rank takes the same decision."""
    mean = torch.tensor(window_means([{"mlm": w["mlm"]} for w in window])["mlm"], dtype=torch.float64)
    if world > 1:
        torch.distributed.all_reduce(mean)
        mean /= world
    return float(mean)


def keeps_best(stage: StageConfig) -> bool:
    """Stages that train retrieval keep their best validated model; the warm-up has its own stop rule."""
    return stage.keep_best and stage.kind != "mlm"


class StepLoop:
    """Runs ``parts`` from ``state.step`` to ``parts.total`` (or the warm-up's target)."""

    def __init__(self, parts: TrainParts, stage: StageConfig, data: PairSet, out_dir: Path, fingerprint: str,
                 hooks: Hooks, target: float | None):
        self.parts, self.stage, self.data, self.hooks, self.target = parts, stage, data, hooks, target
        self.ckpt_dir, self.log_path = out_dir / "checkpoints", out_dir / "train_log.jsonl"
        self.fingerprint = fingerprint
        self.terms = loss_terms(stage)

    def make_batch(self, g: int) -> dict[str, torch.Tensor]:
        """This rank's share of micro-batch ``g``, collated; masks are a function of (seed, g, rank)."""
        p = self.parts
        idx = p.plan.indices(g)
        mine = idx[p.rank * len(idx) // p.world:(p.rank + 1) * len(idx) // p.world]
        margins = [self.data.margins(i) for i in mine] if self.stage.objective == "margin_mse" else None
        masks = torch.Generator().manual_seed(self.stage.seed * 1_000_003 + g * 1009 + p.rank)
        batch = p.collate([self.data.example(i) for i in mine], masks, margins=margins)
        return {k: v.pin_memory() for k, v in batch.items()} if p.device.type == "cuda" else batch

    def evaluate(self, state: TrainState) -> dict | None:
        """Validation retrieval (rank 0). A stage that keeps its best model keeps the latest one
        within ``best_tolerance`` of the top score so far: a difference the validation set cannot
        resolve is a tie, and a tie goes to the later, more trained model."""
        if self.hooks.evaluate is None or self.parts.rank != 0:
            return None
        metrics = {"step": state.step, **self.hooks.evaluate(self.parts.model)}
        state.evals.append(metrics)
        log.info("stage %s step %d: validation %s", self.stage.name, state.step,
                 ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if k not in ("step", "n")))
        score = metrics.get(SELECT_METRIC)
        if keeps_best(self.stage) and score is not None:
            top = max(e[SELECT_METRIC] for e in state.evals if SELECT_METRIC in e)
            if score >= top - self.stage.best_tolerance:  # a tie, within the tolerance: the later model
                state.best = Best(state.step, score)
                save_best(self.ckpt_dir, self.parts, state.best)
        return metrics

    def write(self, record: dict) -> None:
        if self.parts.rank == 0:
            with open(self.log_path, "a") as fh:
                fh.write(json.dumps(record) + "\n")
        if self.hooks.on_record is not None and self.parts.rank == 0:
            self.hooks.on_record(record)

    def run(self, state: TrainState) -> str:
        """Train to the end; returns why it stopped: ``steps`` or ``mlm_target``."""
        p, stage = self.parts, self.stage
        threads = stage.collate_threads or (4 if p.device.type == "cuda" else 1)
        batches = TokenCounter(prefetched(self.make_batch, state.step * stage.accumulation,
                                          p.total * stage.accumulation, threads))
        bar = tqdm(total=p.total, initial=state.step, desc=f"stage {stage.name}", unit="step",
                   disable=None if self.hooks.progress and p.rank == 0 else True,  # None: on a terminal only
                   dynamic_ncols=True)
        pairs_per_step = p.plan.batch_size * stage.accumulation
        window_t, window_steps, stop_reason = time.perf_counter(), 0, "steps"
        try:
            while state.step < p.total:
                terms = train_step(p, batches, stage)
                state.step += 1
                window_steps += 1
                state.window = [*state.window, terms][-stage.log_every:]
                if (self.target is not None and len(state.window) == stage.log_every
                        and mlm_window_mean(state.window, p.world) < self.target):
                    stop_reason = "mlm_target"
                done = state.step == p.total or stop_reason == "mlm_target"
                bar.update(1)
                record = None
                if state.step % stage.log_every == 0 or done:
                    now = time.perf_counter()
                    lrs = p.scheduler.get_last_lr()
                    record = {"step": state.step, **window_means(state.window), "lr": lrs[0],
                              **({"lrs": lrs} if len(set(lrs)) > 1 else {}),
                              "pairs_per_s": window_steps * pairs_per_step / max(now - window_t, 1e-9),
                              "tokens_per_s": batches.take() * p.world / max(now - window_t, 1e-9),
                              **gpu_memory(p.device), "total_steps": p.total}
                    window_t, window_steps = now, 0
                    bar.set_postfix({t: f"{record[t]:.3f}" for t in ("total", *self.terms)}, refresh=False)
                    log.info("stage %s step %d/%d: loss %.4f (%s), grad-norm %.3f, lr %.2e (means of the last %d "
                             "steps)", stage.name, state.step, p.total, record["total"],
                             ", ".join(f"{t} {record[t]:.4f}" for t in self.terms), record["grad_norm"], record["lr"],
                             len(state.window))
                if done or (stage.eval_every and state.step % stage.eval_every == 0):
                    metrics = self.evaluate(state)
                    if metrics is not None:
                        record = {**(record or {"step": state.step, **window_means(state.window)}), "eval": metrics}
                if record is not None:
                    self.write(record)
                if p.rank == 0 and state.step % stage.checkpoint_every == 0 and not done:
                    save_state(self.ckpt_dir, p, state, self.fingerprint)
                for callback in self.hooks.after_step:
                    callback(state.step)
                if done:
                    break
        finally:
            bar.close()
            batches.close()
        return stop_reason


def warmup_target(stage: StageConfig, domain_vocab: int) -> float | None:
    """The warm-up's stop threshold: ``mlm_target`` × ln |V_D| (the loss of a uniform guess)."""
    return stage.mlm_target * math.log(domain_vocab) if stage.mlm_target is not None else None
