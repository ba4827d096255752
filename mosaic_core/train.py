"""The trainer of stages 2–3 (and the MLM warm-up): one :class:`StageConfig`, one model in, one out.

AdamW (no decay on biases and LayerNorm), warmup then linear/cosine decay, gradient clipping,
gradient accumulation, bf16 autocast, gradient caching (:mod:`mosaic_core.gradcache`), data
parallel under ``torchrun`` (each rank takes its slice of every batch, documents are gathered
for the contrastive loss, gradients are averaged), and exact resume: a checkpoint holds model,
optimizer, scheduler, step and RNG, and the data order and masks are functions of
(seed, step), so a resumed run takes the same batches as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import AutoTokenizer, get_scheduler

from mosaic_core.config import StageConfig
from mosaic_core.encode import max_positions, resolve_precision
from mosaic_core.gradcache import joint_backward, mlm_backward
from mosaic_core.losses import JointLoss
from mosaic_core.model import DualEncoder, PairCollator, build_model, save_model
from mosaic_core.models import resolve_model

log = logging.getLogger(__name__)
Pair = tuple[str, str]
DOMAIN_IDS = "domain_token_ids.json"


class InjectedFailure(RuntimeError):
    """Raised by the ``fail_at_step`` test hook, as a crash would interrupt a stage."""


class StageInputError(ValueError):
    """The stage cannot run on this input; the message says what is missing and what to do."""


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
    """The MLM stage's reference point: the loss of predicting domain tokens from their frequencies alone."""


# -- distributed ------------------------------------------------------------------------------

def _world() -> tuple[int, int]:
    """(rank, world size); (0, 1) unless ``torch.distributed`` is initialised (torchrun)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _average_gradients(params: list[torch.nn.Parameter], world: int) -> None:
    if world == 1:
        return
    for p in params:  # every rank reduces every parameter, even one its slice gave no gradient
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        torch.distributed.all_reduce(p.grad)
        p.grad /= world


# -- data order -------------------------------------------------------------------------------

class BatchPlan:
    """Which pairs form global batch ``g``: epoch ``g // per_epoch`` shuffles with ``seed + epoch``,
    so a batch is a pure function of (seed, g) and resuming needs only the step."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.seed = n, seed
        self.batch_size = min(batch_size, n)
        self.per_epoch = n // self.batch_size
        self._epoch, self._perm = -1, None

    def indices(self, g: int) -> list[int]:
        epoch, i = divmod(g, self.per_epoch)
        if epoch != self._epoch:
            self._epoch = epoch
            self._perm = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + epoch))
        return self._perm[i * self.batch_size:(i + 1) * self.batch_size].tolist()


# -- checkpoints ------------------------------------------------------------------------------

def _checkpoints(ckpt_dir: Path) -> list[Path]:
    return sorted(ckpt_dir.glob("step-*"), key=lambda p: int(p.name.split("-")[1]))


def save_checkpoint(ckpt_dir: Path, step: int, state: dict, keep: int = 2) -> Path:
    """``ckpt_dir/step-N/state.pt``, written under a temporary name and renamed, so a crash
    mid-write never leaves a half checkpoint; older ones beyond ``keep`` are removed."""
    tmp = ckpt_dir / f".tmp-step-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(state, tmp / "state.pt")
    final = ckpt_dir / f"step-{step:08d}"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in _checkpoints(ckpt_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_latest_checkpoint(ckpt_dir: Path, fingerprint: str) -> dict | None:
    """The newest checkpoint written for ``fingerprint`` (stage config + inputs), else None."""
    for path in reversed(_checkpoints(ckpt_dir)):
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=False)
        if state.get("fingerprint") == fingerprint:
            return state
        log.warning("ignoring checkpoint %s: written for other inputs or another stage config", path)
    return None


def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# -- evaluation hook --------------------------------------------------------------------------

@torch.no_grad()
def embed_texts(model: DualEncoder, tokenizer, texts: list[str], max_length: int, device: torch.device,
                batch_size: int = 64) -> torch.Tensor:
    """``[N, d]`` L2-normalised embeddings (eval mode, fp32)."""
    was_training = model.training
    model.eval()
    out = []
    for lo in range(0, len(texts), batch_size):
        enc = tokenizer(texts[lo:lo + batch_size], padding=True, truncation=True, max_length=max_length,
                        return_tensors="pt").to(device)
        out.append(F.normalize(model.embed(enc["input_ids"], enc["attention_mask"]).float(), dim=-1))
    model.train(was_training)
    return torch.cat(out)


def heldout_retrieval(model: DualEncoder, tokenizer, pairs: list[Pair], stage: StageConfig,
                      device: torch.device) -> dict[str, float]:
    """Recall@1 and MRR of each held-out query's own document among all held-out documents."""
    q = embed_texts(model, tokenizer, [p[0] for p in pairs], stage.query_max_length, device)
    d = embed_texts(model, tokenizer, [p[1] for p in pairs], stage.document_max_length, device)
    scores = q @ d.T
    own = scores.diagonal().unsqueeze(1)
    rank = (scores > own).sum(1) + 1
    return {"recall@1": float((rank == 1).float().mean()), "mrr": float((1.0 / rank).mean()), "n": len(pairs)}


def split_heldout(pairs: list[Pair], n: int) -> tuple[list[Pair], list[Pair]]:
    """(training pairs, held-out pairs): the ``n`` pairs (at most a fifth) with the lowest
    content hash are held out, so the split stays put as new snapshots add pairs."""
    n = min(n, len(pairs) // 5)
    order = sorted(range(len(pairs)),
                   key=lambda i: hashlib.blake2b("\x1f".join(pairs[i]).encode(), digest_size=8).digest())
    held = set(order[:n])
    return [p for i, p in enumerate(pairs) if i not in held], [pairs[i] for i in sorted(held)]


# -- the stage --------------------------------------------------------------------------------

def _param_groups(model: DualEncoder, weight_decay: float, decay_embeddings: bool) -> list[dict]:
    """Biases and LayerNorms never decay; the embedding matrix not in the warm-up, whose
    frozen rows must stay bit-identical (AdamW decays a row even when its gradient is zero)."""
    embeddings = model.embeddings
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            skip = p.ndim < 2 or "norm" in name.lower() or (p is embeddings and not decay_embeddings)
            (no_decay if skip else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _freeze_for_warmup(model: DualEncoder, domain_ids: torch.Tensor, rows: bool) -> None:
    """MLM warm-up: the encoder is frozen, except the domain rows of the embedding matrix when
    ``rows``."""
    for p in model.encoder.parameters():
        p.requires_grad_(False)
    if not rows:
        return
    weight = model.encoder.get_input_embeddings().weight
    weight.requires_grad_(True)
    keep = torch.zeros(weight.shape[0], 1, dtype=weight.dtype, device=weight.device)
    keep[domain_ids] = 1
    weight.register_hook(lambda g: g * keep)


def _means(window: deque) -> dict[str, float]:
    """Each logged quantity averaged over the window's steps."""
    return {k: sum(w[k] for w in window) / len(window) for k in window[0]}


def _mlm_mean(window: deque, world: int) -> float:
    """Mean MLM loss over the window, averaged across ranks so every rank takes the same decision."""
    mean = torch.tensor(_means(window)["mlm"], dtype=torch.float64)
    if world > 1:
        torch.distributed.all_reduce(mean)
        mean /= world
    return float(mean)


def frequency_entropy(tokenizer, docs: list[str], domain_ids: torch.Tensor, max_length: int,
                      sample: int = 2000) -> float:
    """Entropy (nats) of the domain tokens' frequencies in the first ``sample`` documents: the MLM
    loss of a head that knows which domain tokens are common but reads no context (ln|V_D| is the
    loss of a uniform guess). The warm-up logs both, so its loss curve can be read against them."""
    ids = tokenizer(docs[:sample], truncation=True, max_length=max_length)["input_ids"]
    counts = torch.bincount(torch.tensor([i for row in ids for i in row], dtype=torch.long),
                            minlength=int(domain_ids.max()) + 1)[domain_ids].double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())


def _prefetched(make: Callable[[int], dict], start: int, stop: int) -> Iterator[dict]:
    """``make(start)``, ``make(start + 1)``, … ``make(stop - 1)``, each built in a background thread
    while the caller trains on the one before (tokenisation releases the GIL), so the accelerator
    does not wait on collation. Closing the iterator waits for the one batch in flight."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mosaic-collate") as pool:
        pending = pool.submit(make, start) if start < stop else None
        for g in range(start, stop):
            current = pending.result()
            pending = pool.submit(make, g + 1) if g + 1 < stop else None
            yield current


def read_domain_ids(model_dir: str) -> torch.Tensor | None:
    path = Path(model_dir) / DOMAIN_IDS
    return torch.tensor(json.loads(path.read_text()), dtype=torch.long) if path.is_file() else None


def train_stage(
    input_model: str,
    pairs: list[Pair],
    stage: StageConfig,
    out_dir: Path,
    heldout: list[Pair] | None = None,
    fingerprint: str = "",
    device: torch.device | None = None,
    eval_fn: Callable[[DualEncoder], dict] | None = None,
    fail_at_step: int | None = None,
    progress: bool = True,
) -> StageResult:
    """Train ``stage`` from ``input_model`` on ``pairs``; write the model to ``out_dir``.

    Resumes from ``out_dir/checkpoints`` when a checkpoint for the same ``fingerprint``
    (inputs + stage config, chosen by the caller) is there. ``eval_fn`` defaults to held-out
    retrieval on ``heldout``. ``fail_at_step`` raises :class:`InjectedFailure` after that
    optimizer step (a test hook for crash/resume).
    """
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    rank, world = _world()
    if device is None:
        device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu")
    resolved = resolve_model(input_model)
    domain_ids = read_domain_ids(resolved)
    if stage.uses_mlm and stage.mlm_tokens == "domain" and domain_ids is None:
        raise StageInputError(f"stage {stage.name!r} ({stage.kind}) masks domain tokens, but {input_model} has no "
                              f"{DOMAIN_IDS}: run stage 1 (`mosaic vocab`) first, or set mlm_tokens='all'")
    if stage.kind == "mlm" and domain_ids is None:
        raise StageInputError(f"the mlm warm-up trains the domain rows of {input_model}, which has no {DOMAIN_IDS}")
    if len(pairs) < 2:
        raise StageInputError(f"stage {stage.name!r} needs at least 2 training pairs, got {len(pairs)}")

    torch.manual_seed(stage.seed)
    tokenizer = AutoTokenizer.from_pretrained(resolved)
    model, head_loaded = build_model(resolved)
    limit = max_positions(model.encoder.config)
    if max(stage.query_max_length, stage.document_max_length) > limit:
        log.warning("stage %s: %s takes at most %d positions; query/document lengths capped to it",
                    stage.name, input_model, limit)
        stage = stage.model_copy(update={"query_max_length": min(stage.query_max_length, limit),
                                         "document_max_length": min(stage.document_max_length, limit)})
    model.to(device).train()
    dev_domain = domain_ids.to(device) if domain_ids is not None else None
    if stage.kind == "mlm":
        _freeze_for_warmup(model, dev_domain, stage.mlm_rows)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(_param_groups(model, stage.weight_decay, stage.kind != "mlm"), lr=stage.lr)

    plan = BatchPlan(len(pairs), stage.batch_size, stage.seed)
    if plan.batch_size % world:
        raise StageInputError(f"batch size {plan.batch_size} must be a multiple of the {world} processes")
    steps_per_epoch = max(1, plan.per_epoch // stage.accumulation)
    total = stage.epochs * steps_per_epoch if stage.max_steps is None else stage.max_steps
    scheduler = get_scheduler("constant_with_warmup" if stage.schedule == "constant" else stage.schedule,
                              optimizer, num_warmup_steps=math.ceil(stage.warmup_ratio * total),
                              num_training_steps=total)
    ckpt_dir = out_dir / "checkpoints"
    step, resumed_from = 0, None
    # Logged values are means over the last log_every steps (the window); the warm-up's stop rule:
    # the window's mean MLM loss below mlm_target·ln|V_D|.
    target = stage.mlm_target * math.log(len(domain_ids)) if stage.mlm_target is not None else None
    reference = None
    if stage.kind == "mlm":
        reference = frequency_entropy(tokenizer, [p[1] for p in pairs], domain_ids, stage.document_max_length)
        log.info("stage %s: MLM loss of a uniform guess ln|V_D| = %.3f, of domain-token frequencies alone %.3f "
                 "(%.2f·ln|V_D|)%s", stage.name, math.log(len(domain_ids)), reference,
                 reference / math.log(len(domain_ids)), "" if target is None else f"; target {target:.3f}")
    window: deque = deque(maxlen=stage.log_every)
    stop_reason = "steps"
    state = load_latest_checkpoint(ckpt_dir, fingerprint)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        _set_rng_state(state["rng"])
        step = resumed_from = state["step"]
        window.extend(state["window"])
        log.info("stage %s: resuming from checkpoint at step %d of %d", stage.name, step, total)

    mlm_domain = dev_domain if stage.mlm_tokens == "domain" else None
    # Documents are masked only when a stage trains the MLM term; masks are a function of (seed, batch).
    collate = PairCollator(tokenizer, domain_ids if stage.mlm_tokens == "domain" else None, stage.query_max_length,
                           stage.document_max_length, stage.mlm_probability if stage.uses_mlm else 0.0)
    loss_fn = JointLoss(stage.alpha, stage.scale, stage.symmetric)
    dtype = resolve_precision(stage.precision, device)
    chunk = stage.chunk_size or plan.batch_size
    if eval_fn is None and heldout:
        def eval_fn(m: DualEncoder) -> dict:
            return heldout_retrieval(m, tokenizer, heldout, stage, device)

    log_path = out_dir / "train_log.jsonl"
    out_dir.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        kept = [ln for ln in log_path.read_text().splitlines() if json.loads(ln)["step"] <= step] \
            if log_path.exists() and resumed_from else []
        log_path.write_text("".join(ln + "\n" for ln in kept))
    evals: list[dict] = []
    last: dict[str, float] = {}

    def make_batch(g: int) -> dict[str, torch.Tensor]:
        """This rank's share of micro-batch ``g``, collated; masks are a function of (seed, g, rank)."""
        idx = plan.indices(g)
        mine = idx[rank * len(idx) // world:(rank + 1) * len(idx) // world]
        batch = collate([pairs[i] for i in mine],
                        torch.Generator().manual_seed(stage.seed * 1_000_003 + g * 1009 + rank))
        return {k: v.pin_memory() for k, v in batch.items()} if device.type == "cuda" else batch

    batches = _prefetched(make_batch, step * stage.accumulation, total * stage.accumulation)
    window_pairs, window_t = 0, time.perf_counter()
    bar = tqdm(total=total, initial=step, desc=f"stage {stage.name}", unit="step",
               disable=not progress or rank != 0, dynamic_ncols=True)
    use_mlm = stage.kind == "joint" and stage.alpha > 0
    # The loss terms this stage computes: the bar and the log show only these.
    terms = [t for t, on in (("mlm", use_mlm or stage.kind == "mlm"), ("contrastive", stage.kind != "mlm")) if on]
    while step < total:
        losses = {"total": 0.0, "mlm": 0.0, "contrastive": 0.0}
        for _ in range(stage.accumulation):
            batch = {k: v.to(device, non_blocking=True) for k, v in next(batches).items()}
            with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                if stage.kind == "mlm":
                    parts = mlm_backward(model, batch, mlm_domain, chunk)
                else:
                    parts = joint_backward(model, batch, loss_fn, mlm_domain, chunk, use_mlm=use_mlm)
            for k in losses:
                losses[k] += parts[k] / stage.accumulation
            window_pairs += len(batch["query_ids"]) * world
        if stage.accumulation > 1:
            for p in params:
                if p.grad is not None:
                    p.grad /= stage.accumulation
        _average_gradients(params, world)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, stage.max_grad_norm))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        window.append({**losses, "grad_norm": grad_norm})
        if target is not None and len(window) == window.maxlen and _mlm_mean(window, world) < target:
            stop_reason = "mlm_target"
        done = step == total or stop_reason == "mlm_target"
        last = {**_means(window), "lr": scheduler.get_last_lr()[0]}
        bar.update(1)
        bar.set_postfix(loss=f"{losses['total']:.3f}", **{t: f"{losses[t]:.3f}" for t in terms}, refresh=False)
        record = None
        if step % stage.log_every == 0 or done:
            now = time.perf_counter()
            record = {"step": step, **last, "pairs_per_s": window_pairs / max(now - window_t, 1e-9)}
            window_pairs, window_t = 0, now
            log.info("stage %s step %d/%d: loss %.4f (%s), grad-norm %.3f, lr %.2e (means of the last %d steps)",
                     stage.name, step, total, last["total"], ", ".join(f"{t} {last[t]:.4f}" for t in terms),
                     last["grad_norm"], last["lr"], len(window))
        if eval_fn is not None and rank == 0 and (done or (stage.eval_every and step % stage.eval_every == 0)):
            metrics = {"step": step, **eval_fn(model)}
            evals.append(metrics)
            record = {**(record or {"step": step, **last}), "eval": metrics}
            log.info("stage %s step %d: held-out %s", stage.name, step, metrics)
        if record is not None and rank == 0:
            with open(log_path, "a") as fh:
                fh.write(json.dumps(record) + "\n")
        if rank == 0 and (step % stage.checkpoint_every == 0) and not done:
            save_checkpoint(ckpt_dir, step, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                             "scheduler": scheduler.state_dict(), "step": step,
                                             "rng": _rng_state(), "window": list(window),
                                             "fingerprint": fingerprint})
        if fail_at_step is not None and step == fail_at_step:
            bar.close()
            batches.close()
            raise InjectedFailure(f"stage {stage.name}: injected failure after step {step}")
        if done:
            break
    bar.close()
    batches.close()
    if target is not None:
        mean = last["mlm"]
        if stop_reason == "mlm_target":
            log.info("stage %s: MLM loss %.3f below its target %.3f (%.2f·ln|V_D|) after %d steps",
                     stage.name, mean, target, stage.mlm_target, step)
        else:
            log.warning("stage %s: ran its %d steps with the MLM loss at %.3f, not below its target %.3f "
                        "(%.2f·ln|V_D|); the joint stage's MLM term starts near chance: raise max_steps or lr",
                        stage.name, step, mean, target, stage.mlm_target)

    result = StageResult(stage.name, str(out_dir), step, len(pairs), time.perf_counter() - t0, resumed_from,
                         head_loaded, last, evals, 0 if domain_ids is None else len(domain_ids), world,
                         stop_reason, target, reference)
    if rank == 0:
        model.to("cpu")
        save_model(model, resolved, out_dir)
        if domain_ids is not None:
            shutil.copyfile(Path(resolved) / DOMAIN_IDS, out_dir / DOMAIN_IDS)
        (out_dir / "stage.json").write_text(json.dumps({"config": stage.model_dump(mode="json"),
                                                        "input_model": input_model, "fingerprint": fingerprint,
                                                        "result": asdict(result)}, indent=2))
        shutil.rmtree(ckpt_dir, ignore_errors=True)  # the saved model supersedes them
    return result
