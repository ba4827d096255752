"""A training stage end to end: build the parts, resume, run the loop, write the outputs."""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from mosaic_core.config import StageConfig
from mosaic_core.modeling.card import facts, render
from mosaic_core.modeling.dual_encoder import DualEncoder, build_model, save_model
from mosaic_core.modeling.encode import Encoder
from mosaic_core.modeling.modeldir import copy_domain_ids, write_card, write_stage_record
from mosaic_core.modeling.prompts import declare_prompts
from mosaic_core.modeling.refs import resolve_model
from mosaic_core.trainer.build import TrainParts, build_parts
from mosaic_core.trainer.data import PairSet
from mosaic_core.trainer.heldout import SELECT_METRIC, RetrievalProbe
from mosaic_core.modeling.losses import LOSS_TERMS, loss_terms
from mosaic_core.trainer.loop import Hooks, StepLoop, keeps_best, warmup_target, window_means
from mosaic_core.trainer.state import Best, TrainState, load_state, restore_best
from mosaic_core.trainer.tracking import stage_tracker
from mosaic_core.versioning import runtime

log = logging.getLogger(__name__)


@dataclass
class StageResult:
    stage: str
    out_dir: str
    steps: int
    pairs: int
    seconds: float
    resumed_from: int | None
    head_from_checkpoint: bool
    final: dict[str, float] = field(default_factory=dict)
    evals: list[dict] = field(default_factory=list)
    domain_vocab: int = 0
    world: int = 1
    stop_reason: str = "steps"
    """``steps`` (max_steps or the epochs ran out) or ``mlm_target`` (the warm-up reached its target)."""
    mlm_target_loss: float | None = None
    mlm_frequency_entropy: float | None = None
    """A domain-MLM term's reference point: the loss of predicting domain tokens from their frequencies alone."""
    best_step: int | None = None
    """The step whose model is the stage's output (its best validation NDCG@10), when the stage keeps its best."""
    negatives_per_pair: float = 0.0
    lengths: dict[str, int] = field(default_factory=dict)
    embeddings_trained: bool = True
    """Whether the stage trains a weight an embedding is computed from: false for a head-only MLM
    warm-up, whose model embeds every text as its input model did."""


FREQUENCY_SAMPLE = 2000
"""Documents :func:`frequency_entropy` counts: the first of the training examples, whatever their number."""


def frequency_entropy(tokenizer, docs: list[str], domain_ids: torch.Tensor, max_length: int) -> float:
    """Entropy (nats) of the domain tokens' frequencies in ``docs``: the MLM loss of a head that
    knows which domain tokens are common but reads no context (ln|V_D| is the loss of a uniform
    guess). The warm-up logs both, so its loss curve can be read against them."""
    ids = tokenizer(docs, truncation=True, max_length=max_length)["input_ids"]
    counts = torch.bincount(torch.tensor([i for row in ids for i in row], dtype=torch.long),
                            minlength=int(domain_ids.max()) + 1)[domain_ids].double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())


def validation_scorer(parts: TrainParts, probe: RetrievalProbe) -> Callable[[DualEncoder], dict]:
    """Validation retrieval with the model being trained (eval mode, fp32, the stage's lengths)."""
    lengths = {"query": parts.lengths.query, "document": parts.lengths.document}

    def score(model: DualEncoder) -> dict:
        was_training = model.training
        model.eval()
        encoder = Encoder(model.encoder, parts.tokenizer, model.pooling, True, parts.device, None, parts.lengths.query,
                          prompts=parts.prompts)

        def embed(texts: list[str], kind: str) -> torch.Tensor:
            if model.kind == "sparse":
                return sparse_representations(model, parts, parts.prompts.apply(texts, kind), lengths[kind])
            return torch.from_numpy(np.ascontiguousarray(
                encoder.with_max_length(lengths[kind]).encode(texts, kind=kind)))
        try:
            return probe.score(embed)
        finally:
            model.train(was_training)
    return score


@torch.no_grad()
def sparse_representations(model: DualEncoder, parts: TrainParts, texts: list[str], max_length: int,
                           batch_size: int = 32) -> torch.Tensor:
    """``[N, V]`` SPLADE representations (fp32, on the CPU): relevance is their dot product."""
    out = []
    for lo in range(0, len(texts), batch_size):
        enc = parts.tokenizer(texts[lo:lo + batch_size], padding=True, truncation=True, max_length=max_length,
                              return_tensors="pt").to(parts.device)
        out.append(model.embed(enc["input_ids"], enc["attention_mask"]).float().cpu())
    return torch.cat(out)


def _restart_log(log_path: Path, resumed_from: int | None) -> None:
    """Keep the records up to the resumed step (a fresh run starts an empty log)."""
    kept = [ln for ln in log_path.read_text().splitlines() if json.loads(ln)["step"] <= resumed_from] \
        if log_path.exists() and resumed_from else []
    log_path.write_text("".join(ln + "\n" for ln in kept))


def _reference_points(stage: StageConfig, parts: TrainParts, data: PairSet) -> tuple[float | None, float | None]:
    """(the warm-up's stop threshold, the frequency-only MLM loss of a stage whose MLM term predicts
    domain tokens), logged against ln|V_D|; TensorBoard draws the MLM curve beside the latter. The
    frequencies are those of the first :data:`FREQUENCY_SAMPLE` training documents: a bounded,
    deterministic sample that reads only those texts, whatever the size of the corpus."""
    if not stage.uses_mlm or parts.domain_ids is None or (stage.kind != "mlm" and stage.mlm_tokens != "domain"):
        return None, None
    target = warmup_target(stage, len(parts.domain_ids)) if stage.kind == "mlm" else None
    docs = [data.document(i) for i in range(min(len(data), FREQUENCY_SAMPLE))]
    reference = frequency_entropy(parts.tokenizer, docs, parts.domain_ids, parts.lengths.document)
    uniform = math.log(len(parts.domain_ids))
    log.info("stage %s: MLM loss of a uniform guess ln|V_D| = %.3f, of domain-token frequencies alone %.3f "
             "(%.2f·ln|V_D|)%s", stage.name, uniform, reference, reference / uniform,
             "" if target is None else f"; target {target:.3f}")
    return target, reference


def _report_stop(stage: StageConfig, state: TrainState, stop_reason: str, target: float | None) -> None:
    if target is None:
        return
    mean = float(np.mean([float(w["mlm"]) for w in state.window]))
    if stop_reason == "mlm_target":
        log.info("stage %s: MLM loss %.3f below its target %.3f (%.2f·ln|V_D|) after %d steps",
                 stage.name, mean, target, stage.mlm_target, state.step)
    else:
        log.warning("stage %s: ran its %d steps with the MLM loss at %.3f, not below its target %.3f "
                    "(%.2f·ln|V_D|); the joint stage's MLM term starts near chance: raise max_steps or lr",
                    stage.name, state.step, mean, target, stage.mlm_target)


def train_stage(input_model: str, data: PairSet | list, stage: StageConfig, out_dir: Path,
                validation: RetrievalProbe | None = None, fingerprint: str = "", hooks: Hooks | None = None,
                ) -> StageResult:
    """Train ``stage`` from ``input_model`` on ``data``; write the model to ``out_dir``.

    Resumes from ``out_dir/checkpoints`` when a checkpoint for the same ``fingerprint``
    (inputs + stage config, chosen by the caller) is there. ``validation`` is scored every
    ``eval_every`` steps and at the end; a stage that keeps its best (``keep_best``) writes the
    model of its best validation NDCG@10 — the input model included — not its last.
    """
    t0 = time.perf_counter()
    out_dir, hooks, data = Path(out_dir), hooks or Hooks(), PairSet.of(data)
    resolved = resolve_model(input_model)
    parts = build_parts(stage, resolved, input_model, data)
    if hooks.evaluate is None and validation is not None:
        hooks.evaluate = validation_scorer(parts, validation)
    target, reference = _reference_points(stage, parts, data)
    ckpt_dir = out_dir / "checkpoints"
    state = load_state(ckpt_dir, parts, fingerprint) or TrainState()
    if state.resumed_from is not None:
        log.info("stage %s: resuming from checkpoint at step %d of %d", stage.name, state.step, parts.total)
    out_dir.mkdir(parents=True, exist_ok=True)
    if parts.rank == 0:
        _restart_log(out_dir / "train_log.jsonl", state.resumed_from)
    tracker = None if parts.rank else stage_tracker(out_dir, {
        "stage": stage.model_dump(mode="json"), "input_model": input_model, "pairs": len(data),
        "domain_vocab": 0 if parts.domain_ids is None else len(parts.domain_ids)}, state.resumed_from, reference,
        set(LOSS_TERMS) - set(loss_terms(stage)))
    if tracker is not None:
        hooks = replace(hooks, on_record=_chain(tracker, hooks.on_record))
    try:
        stop_reason = StepLoop(parts, stage, data, out_dir, fingerprint, hooks, target).run(state)
        input_won = _input_competes(parts, resolved, stage, state, hooks, tracker)
    finally:
        if tracker is not None:
            tracker.close()
    _report_stop(stage, state, stop_reason, target)
    best_step = state.best.step if keeps_best(stage) and state.best is not None else None
    if parts.rank == 0 and best_step is not None and best_step != state.step:
        log.info("stage %s: keeping step %d (validation NDCG@10 %.4f), not the last step %d", stage.name, best_step,
                 state.best.score, state.step)
        if not input_won:
            restore_best(ckpt_dir, parts, state.best)
    result = StageResult(
        stage.name, str(out_dir), state.step, len(data), time.perf_counter() - t0, state.resumed_from,
        parts.head_loaded, window_means(state.window) if state.window else {},
        state.evals, 0 if parts.domain_ids is None else len(parts.domain_ids), parts.world, stop_reason, target,
        reference, best_step, data.negatives_per_pair(), asdict(parts.lengths),
        stage.kind != "mlm" or stage.mlm_rows)
    if parts.rank == 0:
        _write_outputs(parts, resolved, input_model, stage, fingerprint, result, out_dir)
    return result


def _input_competes(parts: TrainParts, resolved: str, stage: StageConfig, state: TrainState, hooks: Hooks,
                    tracker) -> bool:
    """The input model competes too, so that a stage never hands on a worse model. It is scored
    after the last step (training starts at once: on a CPU the validation takes most of a minute)
    and becomes the stage's output when it beats the kept model by more than ``best_tolerance``;
    then its weights are loaded into ``parts.model`` and True is returned."""
    if (not keeps_best(stage) or not stage.eval_every or hooks.evaluate is None or parts.rank != 0
            or state.best is None or any(e["step"] == 0 for e in state.evals)):  # a resumed stage scored it already
        return False
    torch.manual_seed(stage.seed)  # the input model exactly as the stage built it, untrained head included
    model, _ = build_model(resolved, kind=stage.model_kind)
    metrics = {"step": 0, **hooks.evaluate(model.to(parts.device))}
    state.evals.insert(0, metrics)
    if tracker is not None:
        tracker({"step": 0, "eval": metrics})
    score = metrics.get(SELECT_METRIC)
    log.info("stage %s: the input model's validation %s", stage.name,
             ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if k not in ("step", "n")))
    if score is None or score <= state.best.score + stage.best_tolerance:
        return False
    state.best = Best(0, score)
    parts.model.load_state_dict(model.state_dict())
    return True


def _chain(*callbacks: Callable[[dict], None] | None) -> Callable[[dict], None]:
    def call(record: dict) -> None:
        for callback in callbacks:
            if callback is not None:
                callback(record)
    return call


def _write_outputs(parts: TrainParts, resolved: str, input_model: str, stage: StageConfig, fingerprint: str,
                   result: StageResult, out_dir: Path) -> None:
    parts.model.to("cpu")
    save_model(parts.model, resolved, out_dir)
    declare_prompts(out_dir, parts.prompts)
    copy_domain_ids(resolved, out_dir)
    write_stage_record(out_dir, {"config": stage.model_dump(mode="json"), "input_model": input_model,
                                 "fingerprint": fingerprint, "seed": stage.seed, "runtime": runtime(),
                                 "result": asdict(result)})
    write_card(out_dir, render(facts(str(out_dir), "its domain corpus")))
    shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)  # the saved model supersedes them
