"""Stage 1, step 4b: learn the new embedding rows by distillation (token distillation, Dobler et
al. 2025, "AweDist"), so that vocabulary expansion costs (almost) nothing.

The mean of a token's base pieces is only a starting point: the encoder was trained on the
piece sequence, and one averaged vector in its place moves every embedding of a text that
holds the token. Here only the new rows train (the encoder, every old row and everything else
stay bit-identical) so that the expanded model, reading domain text through the new
tokenizer, reproduces what the base model produces on the *same* text through the base
tokenizer. The base model needs no copy: old rows are untouched, so the expanded model fed
base token ids *is* the base model.

Targets (``DistillConfig.target``):

* ``pooled`` — the sentence embedding the model is used for (its own pooling, normalised):
  loss ``1 − cos``;
* ``tokens`` — the last hidden state at every position: a new token's target is the mean of
  the base states of the pieces it replaces (aligned by character offsets), every other
  position its own base state (AweDist's objective for an encoder); loss: mean squared error;
* ``both`` — their sum.

Contexts (``DistillConfig.contexts``): ``texts`` trains on the corpus texts as they come, so
a token gets as many updates as texts it appears in; ``sentences`` splits the texts into
sentences and draws, per new token, up to ``per_token`` sentences that hold it (token
distillation's per-token snippets), so a drug name used 60 times is seen about as often as a
word used 5,000 times.

Held-out texts decide when to stop: every ``eval_every`` steps the held-out loss is measured,
the best rows are kept, and training stops after ``patience`` evaluations without a gain.
Resumable: the rows, the optimizer, the step and the best rows so far are checkpointed
(tensors and plain values, loaded with ``weights_only=True``: nothing in a checkpoint runs).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from mosaic_core.config import DistillConfig
from mosaic_core.files import replacing
from mosaic_core.modeling.encode import Pooling, pool, resolve_precision
from mosaic_core.modeling.tracking import open_tracker
from mosaic_core.vocab.windows import Window, _order, draw_windows, first_windows, make_windows, reverted

log = logging.getLogger(__name__)
CHECKPOINT = "distill-state.pt"
STATE_FORMAT = 2
"""The checkpoint's layout: 2, the optimizer's state for the trained rows alone (1, unmarked: for
the whole matrix, which a resumed run cannot load: it starts over)."""


def _pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.as_tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask


def collate(windows: list[Window], pad_id: int) -> dict[str, torch.Tensor]:
    """Padded base and new ids, their masks, and ``assign [B, T_new, T_base]``: row j averages
    the base positions that new position j covers."""
    base_ids, base_mask = _pad([w.base_ids for w in windows], pad_id)
    new_ids, new_mask = _pad([w.new_ids for w in windows], pad_id)
    assign = torch.zeros(len(windows), new_ids.shape[1], base_ids.shape[1])
    for i, w in enumerate(windows):
        assign[i, torch.as_tensor(w.align, dtype=torch.long), torch.arange(len(w.align))] = 1.0
    assign = assign / assign.sum(-1, keepdim=True).clamp(min=1.0)
    return {"base_ids": base_ids, "base_mask": base_mask, "new_ids": new_ids, "new_mask": new_mask,
            "assign": assign}


def distill_loss(student: torch.Tensor, teacher: torch.Tensor, batch: dict[str, torch.Tensor],
                 pooling: Pooling, target: str) -> torch.Tensor:
    """The distillation loss from last hidden states ``student [B, T_new, h]`` (new tokenization)
    and ``teacher [B, T_base, h]`` (base tokenization) of the same texts."""
    loss = student.new_zeros((), dtype=torch.float32)
    if target in ("pooled", "both"):
        s = F.normalize(pool(student, batch["new_mask"], pooling), dim=-1)
        t = F.normalize(pool(teacher, batch["base_mask"], pooling), dim=-1)
        loss = loss + (1 - (s * t).sum(-1)).mean()
    if target in ("tokens", "both"):
        aligned = torch.bmm(batch["assign"], teacher.float())
        mask = batch["new_mask"].bool()
        loss = loss + F.mse_loss(student.float()[mask], aligned[mask])
    return loss


@dataclass
class DistillResult:
    steps: int
    best_step: int
    windows: int
    heldout_windows: int
    heldout_loss_before: float
    heldout_loss_after: float
    stop_reason: str
    seconds: float
    evals: list[dict] = field(default_factory=list)
    evaluated_on: str = "held-out"
    """Whose loss picked the rows: ``held-out`` windows, or ``training`` windows where no held-out
    text holds a new token (a small corpus)."""

    def to_dict(self) -> dict:
        return asdict(self)


class RowDistiller:
    """Trains the rows ``new_ids`` of ``encoder``'s input embeddings (everything else frozen)."""

    def __init__(self, encoder: torch.nn.Module, pooling: Pooling, new_ids: Sequence[int], pad_id: int,
                 cfg: DistillConfig, device: torch.device):
        self.encoder, self.pooling, self.cfg, self.device, self.pad_id = encoder, pooling, cfg, device, pad_id
        self.dtype = resolve_precision(cfg.precision, device)
        for p in encoder.parameters():
            p.requires_grad_(False)
        self.weight = encoder.get_input_embeddings().weight
        self.weight.requires_grad_(True)
        self.rows = torch.as_tensor(list(new_ids), dtype=torch.long, device=self.weight.device)
        # Adam holds the trained rows alone (old rows are never touched), not the whole matrix:
        # element by element the same update, without a step over every row of the vocabulary.
        self.trained = torch.nn.Parameter(self.weight.detach()[self.rows].clone())
        self.optimizer = torch.optim.Adam([self.trained], lr=cfg.lr)

    def close(self) -> None:
        self.weight.grad = None
        self.weight.requires_grad_(False)

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.dtype or torch.float32, enabled=self.dtype is not None)

    def _states(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).last_hidden_state

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        batch = {k: v.to(self.device) for k, v in batch.items()}
        with self._autocast():
            with torch.no_grad():
                teacher = self._states(batch["base_ids"], batch["base_mask"])
            student = self._states(batch["new_ids"], batch["new_mask"])
        return distill_loss(student, teacher, batch, self.pooling, self.cfg.target)

    @torch.no_grad()
    def heldout_loss(self, batches: list[dict[str, torch.Tensor]]) -> float:
        self.encoder.eval()
        total = sum(float(self.loss(b)) * len(b["new_ids"]) for b in batches)
        return total / max(sum(len(b["new_ids"]) for b in batches), 1)

    def lr_at(self, step: int, total: int) -> float:
        """Linear warm-up over the first 5 % of ``total`` steps, then constant (the stop step is unknown)."""
        warm = max(1, math.ceil(0.05 * total))
        return self.cfg.lr * min(1.0, (step + 1) / warm)

    def step(self, batch: dict[str, torch.Tensor], step: int, total: int) -> torch.Tensor:
        self.encoder.eval()  # no dropout: the target is the deterministic base output
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(step, total)
        loss = self.loss(batch)
        loss.backward()
        self.trained.grad = self.weight.grad[self.rows]
        self.weight.grad = None
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            self.weight[self.rows] = self.trained
        return loss.detach()

    def snapshot(self) -> torch.Tensor:
        return self.weight.detach()[self.rows].clone()

    def restore(self, rows: torch.Tensor) -> None:
        with torch.no_grad():
            self.weight[self.rows] = rows.to(self.weight.device, self.weight.dtype)
            self.trained.copy_(self.weight[self.rows])


@dataclass
class DistillState:
    """Where a distillation is: step, the held-out losses so far and the best rows. Saved with
    the rows and the optimizer; loaded with ``weights_only=True`` (tensors and plain values)."""

    before: float
    best_loss: float
    best_rows: torch.Tensor
    step: int = 0
    best_step: int = 0
    bad_evals: int = 0
    evals: list[dict] = field(default_factory=list)

    def save(self, path: Path, distiller: RowDistiller, fingerprint: str) -> None:
        with replacing(path) as tmp:
            torch.save({"fingerprint": fingerprint, "format": STATE_FORMAT, "rows": distiller.snapshot().cpu(),
                        "optimizer": distiller.optimizer.state_dict(), "best_rows": self.best_rows.cpu(),
                        **{k: v for k, v in asdict(self).items() if k != "best_rows"}}, tmp)

    @classmethod
    def load(cls, path: Path, distiller: RowDistiller, fingerprint: str) -> DistillState | None:
        """The saved state (rows and optimizer restored into ``distiller``) if it was written for
        ``fingerprint``, else ``None``."""
        saved = torch.load(path, map_location="cpu", weights_only=True) if path.is_file() else None
        if saved is None or saved["fingerprint"] != fingerprint or saved.get("format") != STATE_FORMAT:
            return None
        distiller.restore(saved["rows"])
        distiller.optimizer.load_state_dict(saved["optimizer"])
        return cls(**{f: saved[f] for f in ("before", "best_loss", "best_rows", "step", "best_step", "bad_evals",
                                            "evals")})

    def record(self, step: int, loss: float, distiller: RowDistiller) -> None:
        """A held-out evaluation: keep the rows when they are the best so far."""
        self.evals.append({"step": step, "heldout_loss": loss})
        if loss < self.best_loss:
            self.best_loss, self.best_step, self.best_rows, self.bad_evals = loss, step, distiller.snapshot(), 0
        else:
            self.bad_evals += 1


def _windows(train_texts: Sequence[str], heldout_texts: Sequence[str], base_tok, new_tok, first: int,
             cfg: DistillConfig) -> tuple[list[Window], list[Window]]:
    """(training windows, held-out windows): per-token sentences (:func:`draw_windows`) or the first
    ``max_texts`` texts' windows, and the first ``heldout_texts`` held-out windows; streamed, so
    only the windows used are ever held."""
    if cfg.contexts == "sentences":
        drawn = draw_windows(train_texts, base_tok, new_tok, cfg.max_length, first, cfg.per_token, cfg.seed)
        train = [w for w, _ in drawn][: cfg.max_texts]
    else:
        train = first_windows(train_texts, base_tok, new_tok, cfg.max_length, first, cfg.max_texts)
    heldout = first_windows(heldout_texts, base_tok, new_tok, cfg.max_length, first, cfg.heldout_texts)
    if not train:
        raise ValueError("distillation needs texts that hold new tokens: no training text holds one; use "
                         "init='mean' for so small a corpus")
    return train, heldout


def distill_rows(encoder: torch.nn.Module, pooling: Pooling, base_tok, new_tok, new_ids: Sequence[int],
                 train_texts: Sequence[str], heldout_texts: Sequence[str], cfg: DistillConfig,
                 work_dir: Path, fingerprint: str = "", device: torch.device | None = None,
                 progress: bool = True) -> DistillResult:
    """Distil the rows ``new_ids`` of ``encoder`` (see the module docstring); the encoder ends
    with the best rows found. ``work_dir`` holds the checkpoint of an interrupted run, which a
    rerun with the same ``fingerprint`` (the caller's digest of the tokens and config) resumes
    from; it is removed when distillation ends."""
    t0 = time.perf_counter()
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train, heldout = _windows(train_texts, heldout_texts, base_tok, new_tok, min(new_ids), cfg)
    evaluated_on = "held-out"
    if not heldout:  # a small corpus (an update tick's few pairs): no held-out text holds a new token
        heldout, evaluated_on = train[: cfg.heldout_texts], "training"
        log.warning("distillation: none of the %d held-out texts holds a new token; the loss that picks the rows is "
                    "measured on %d training windows instead", len(heldout_texts), len(heldout))
    pad = base_tok.pad_token_id if base_tok.pad_token_id is not None else 0
    held_batches = [collate(heldout[i: i + cfg.batch_size], pad) for i in range(0, len(heldout), cfg.batch_size)]
    distiller = RowDistiller(encoder.to(device), pooling, new_ids, pad, cfg, device)
    per_epoch = max(1, len(train) // cfg.batch_size)
    total = min(cfg.max_steps or cfg.epochs * per_epoch, cfg.epochs * per_epoch)
    ckpt = Path(work_dir) / CHECKPOINT
    state = DistillState.load(ckpt, distiller, fingerprint)
    tracker = open_tracker(Path(work_dir), state.step if state else None)  # event files in work_dir/tb
    tracker.params({"distill": cfg.model_dump(mode="json"), "new_rows": len(new_ids), "windows": len(train),
                    "heldout_windows": len(heldout)})
    if state is None:
        before = distiller.heldout_loss(held_batches)
        state = DistillState(before, before, distiller.snapshot())
        tracker.scalars({"distill/heldout_loss": before}, 0)
    log.info("distillation: %d training windows, %d held out, step %d of %d; held-out loss %.5f with "
             "mean-of-pieces rows", len(train), len(heldout), state.step, total, state.before)
    stop_reason, window, window_t = "steps", [], time.perf_counter()
    bar = tqdm(total=total, initial=state.step, desc="stage 1 distillation", unit="step",
               disable=None if progress else True, dynamic_ncols=True)  # None: on a terminal only
    while state.step < total:
        epoch, i = divmod(state.step, per_epoch)
        idx = _order(len(train), cfg.seed, epoch)[i * cfg.batch_size:(i + 1) * cfg.batch_size]
        window.append(distiller.step(collate([train[j] for j in idx], pad), state.step, total))
        state.step += 1
        bar.update(1)
        if state.step % cfg.eval_every == 0 or state.step == total:
            state.record(state.step, distiller.heldout_loss(held_batches), distiller)
            now = time.perf_counter()
            tracker.scalars({"distill/train_loss": float(torch.stack(window).mean()),
                             "distill/heldout_loss": state.evals[-1]["heldout_loss"],
                             "distill/lr": distiller.optimizer.param_groups[0]["lr"],
                             "distill/windows_per_s": len(window) * cfg.batch_size / max(now - window_t, 1e-9)},
                            state.step)
            train_loss, window, window_t = float(torch.stack(window).mean()), [], now
            bar.set_postfix(train=f"{train_loss:.5f}", heldout=f"{state.evals[-1]['heldout_loss']:.5f}", refresh=False)
            log.info("distillation step %d/%d: train loss %.5f, held-out %.5f (best %.5f at step %d)", state.step,
                     total, train_loss, state.evals[-1]["heldout_loss"], state.best_loss, state.best_step)
            if state.bad_evals >= cfg.patience:
                stop_reason = "patience"
                break
            state.save(ckpt, distiller, fingerprint)
    bar.close()
    tracker.close()
    distiller.restore(state.best_rows)
    distiller.close()
    encoder.to("cpu")
    ckpt.unlink(missing_ok=True)
    log.info("distillation: held-out loss %.5f -> %.5f (best at step %d; stopped: %s)", state.before,
             state.best_loss, state.best_step, stop_reason)
    return DistillResult(state.step, state.best_step, len(train), len(heldout), state.before, state.best_loss,
                         stop_reason, time.perf_counter() - t0, state.evals, evaluated_on)


@torch.no_grad()
def drift(encoder: torch.nn.Module, pooling: Pooling, base_tok, new_tok, texts: Sequence[str], max_length: int,
          batch_size: int = 32) -> dict[str, float]:
    """cos(base embedding, expanded embedding) of each text — the base tokenization through the
    same encoder is the base model — summarised as mean and 5th percentile over ``texts``, and
    the share of texts that hold a new token (the others are exactly 1)."""
    encoder.eval()
    cos, changed = [], 0
    for lo in range(0, len(texts), batch_size):
        chunk = list(texts[lo: lo + batch_size])
        embs, ids = [], []
        for tok in (base_tok, new_tok):
            enc = tok(chunk, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            hidden = encoder(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
            embs.append(F.normalize(pool(hidden, enc["attention_mask"], pooling), dim=-1))
            ids.append([row[m.bool()].tolist() for row, m in zip(enc["input_ids"], enc["attention_mask"], strict=True)])
        cos.append((embs[0] * embs[1]).sum(-1))
        changed += sum(a != b for a, b in zip(*ids, strict=True))
    values = torch.cat(cos).double().numpy() if cos else np.ones(1)
    return {"texts": len(texts), "mean_cos": float(values.mean()), "p5_cos": float(np.percentile(values, 5)),
            "changed": changed / max(len(texts), 1)}


@torch.no_grad()
def _rises(encoder: torch.nn.Module, pooling: Pooling, windows: list[tuple[Window, list[int]]], pad: int,
           batch_size: int) -> dict[int, list[tuple[float, int]]]:
    """Per new token: (rise of cos(base, expanded) when that token alone is read as its base
    pieces again, base pieces it saves there) on each window it is listed for."""
    rows, owners = [], []  # per window: base ids, new ids, then one reverted sequence per token
    for w, (window, tokens) in enumerate(windows):
        rows += [window.base_ids, window.new_ids, *(reverted(window, t) for t in tokens)]
        owners += [(w, None), (w, -1), *((w, t) for t in tokens)]
    emb = torch.zeros(len(rows), encoder.config.hidden_size)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))  # similar lengths: little padding
    for lo in range(0, len(order), batch_size):
        idx = order[lo: lo + batch_size]
        ids, mask = _pad([rows[i] for i in idx], pad)
        hidden = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        emb[idx] = F.normalize(pool(hidden, mask, pooling).float(), dim=-1)
    out: dict[int, list[tuple[float, int]]] = {}
    base = full = None
    for k, (w, t) in enumerate(owners):
        if t is None:
            base = emb[k]
        elif t == -1:
            full = float(base @ emb[k])
        else:
            out.setdefault(t, []).append((float(base @ emb[k]) - full, len(rows[k]) - len(windows[w][0].new_ids)))
    return out


def token_drift(encoder: torch.nn.Module, pooling: Pooling, base_tok, new_tok, texts: Sequence[str],
                max_length: int, first_new_id: int, batch_size: int = 32) -> list[dict]:
    """Which new tokens still move embeddings: on each text that holds new tokens (cut so both
    tokenizations read the same characters), the rise of cos(base embedding, expanded
    embedding) when one new token alone is read as its base pieces again. Per token: the texts
    holding it, the mean and the total rise; largest total first. A token whose row reproduces
    its pieces well rises by about 0; a negative rise means the row does better than its pieces."""
    encoder.eval()
    windows = [(w, w.new_tokens(first_new_id))
               for w in make_windows(texts, base_tok, new_tok, max_length, first_new_id)]
    rises = _rises(encoder, pooling, windows, base_tok.pad_token_id or 0, batch_size)
    out = [{"token": new_tok.convert_ids_to_tokens(t), "texts": len(r), "mean_rise": sum(x for x, _ in r) / len(r),
            "total_rise": sum(x for x, _ in r)} for t, r in rises.items()]
    return sorted(out, key=lambda d: (-d["total_rise"], d["token"]))


def token_costs(encoder: torch.nn.Module, pooling: Pooling, base_tok, new_tok, texts: Sequence[str],
                max_length: int, first_new_id: int, k: int, seed: int = 0, batch_size: int = 32) -> dict[int, dict]:
    """What each new token still costs, per base piece it saves: on up to ``k`` sentences of
    ``texts`` that hold it (drawn as distillation draws them), the mean rise of cos(base
    embedding, expanded embedding) when the token alone is read as its base pieces again,
    divided by the mean number of pieces it saves there. Token id → ``cost``, ``rise``,
    ``saved``, ``sentences``. Tokens in no sentence are absent."""
    encoder.eval()
    windows = draw_windows(texts, base_tok, new_tok, max_length, first_new_id, k, seed)
    out = {}
    for t, r in _rises(encoder, pooling, windows, base_tok.pad_token_id or 0, batch_size).items():
        rise, saved = sum(x for x, _ in r) / len(r), sum(n for _, n in r) / len(r)
        out[t] = {"cost": rise / max(saved, 1.0), "rise": rise, "saved": saved, "sentences": len(r)}
    return out
