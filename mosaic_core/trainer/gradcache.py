"""Gradient caching: the gradients of a contrastive batch of thousands, in memory for a chunk.

The in-batch InfoNCE loss couples every query with every document, so a batch cannot simply
be split into accumulation steps. Gradient caching (Gao et al., 2021) does it exactly:

1. embed every chunk (queries, documents and hard negatives) without building graphs (RNG
   state recorded per chunk);
2. compute the full-batch loss on those embeddings as leaves, and its gradient with respect
   to each embedding;
3. re-run each chunk with graphs (RNG restored, so dropout masks repeat) and backpropagate
   ``sum(embedding * cached_gradient)`` plus the chunk's share of the MLM loss.

A batch that is one chunk takes one plain forward and backward pass instead (same gradients,
no extra no-grad forward).

The parameter gradients equal those of one big-batch step (to float tolerance); peak memory
is that of one chunk plus the ``[B, d]`` embeddings. Every graph comes from one call of the
model (``DualEncoder.forward``), so under DistributedDataParallel every backward pass but the
last of a step runs in ``no_sync`` and the last one reduces the step's gradients across ranks.
Loss components come back as detached 0-d tensors: nothing here waits for the device (the
trainer reads them when it logs).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel

from mosaic_core.modeling.dual_encoder import DualEncoder
from mosaic_core.modeling.losses import IGNORE, JointLoss

Losses = dict[str, torch.Tensor]
Model = DualEncoder | DistributedDataParallel


def _rng_state(device: torch.device) -> tuple:
    """The RNG state dropout draws from on ``device`` (CPU generator, plus CUDA's on a GPU)."""
    return (torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


def _set_rng_state(state: tuple, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def _spans(n: int, chunk_size: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + chunk_size, n)) for lo in range(0, n, chunk_size)]


def unwrap(model: Model) -> DualEncoder:
    return model.module if isinstance(model, DistributedDataParallel) else model


def _sync(model: Model, sync: bool):
    """Gradient reduction across ranks for the pass run inside (DDP's ``no_sync`` otherwise)."""
    return model.no_sync() if isinstance(model, DistributedDataParallel) and not sync else nullcontext()


def _embed_chunks(model: DualEncoder, ids: torch.Tensor, mask: torch.Tensor, spans, rng: list | None):
    """No-grad embeddings of ``ids`` chunk by chunk (recording each chunk's RNG state in ``rng``)."""
    parts = []
    for lo, hi in spans:
        if rng is not None:
            rng.append(_rng_state(ids.device))
        parts.append(model.embed(ids[lo:hi], mask[lo:hi]))
    return torch.cat(parts).requires_grad_()


def joint_backward(
    model: Model,
    batch: dict[str, torch.Tensor],
    loss_fn: JointLoss,
    domain_ids: torch.Tensor | None,
    chunk_size: int,
    use_mlm: bool = True,
    sync: bool = True,
) -> Losses:
    """Accumulate into ``.grad`` the gradients of ``loss_fn`` on the whole ``batch`` (keys from
    :class:`~mosaic_core.modeling.dual_encoder.PairCollator`; ``neg_ids``/``neg_mask`` add hard-negative
    columns), ``chunk_size`` pairs at a time.

    ``domain_ids`` None means all-token MLM; ``use_mlm`` False is the contrastive-only stage.
    ``sync`` False keeps a DDP model from reducing gradients (an accumulation micro-batch that
    is not the step's last). Returns the loss components as detached 0-d tensors.
    """
    n = batch["query_ids"].shape[0]
    negatives = "neg_ids" in batch
    labels = batch["labels"] if use_mlm else None
    if chunk_size >= n and (not negatives or chunk_size >= batch["neg_ids"].shape[0]):
        return _plain_backward(model, batch, loss_fn, labels, domain_ids, sync)
    spans = _spans(n, chunk_size)
    n_masked = int((labels != IGNORE).sum()) if use_mlm else 0
    rng: list = []
    with torch.no_grad():
        q_all = _embed_chunks(unwrap(model), batch["query_ids"], batch["query_mask"], spans, rng)
        d_all = _embed_chunks(unwrap(model), batch["doc_ids"], batch["doc_mask"], spans, None)
        neg_spans = _spans(batch["neg_ids"].shape[0], chunk_size) if negatives else []
        neg_rng: list = []
        n_all = (_embed_chunks(unwrap(model), batch["neg_ids"], batch["neg_mask"], neg_spans, neg_rng)
                 if negatives else None)
    # every term but the MLM's is a function of the embeddings
    retrieval = loss_fn(q_all, d_all, None, n_all, _margins(batch))
    retrieval["total"].backward()
    mlm_total = retrieval["total"].new_zeros(())
    passes = len(spans) + len(neg_spans)
    for i, ((lo, hi), state) in enumerate(zip(spans, rng, strict=True)):
        _set_rng_state(state, q_all.device)
        with _sync(model, sync and i == passes - 1):
            out = model({"query": (batch["query_ids"][lo:hi], batch["query_mask"][lo:hi]),
                         "docs": (batch["doc_ids"][lo:hi], batch["doc_mask"][lo:hi])},
                        labels[lo:hi] if use_mlm else None, domain_ids)
            surrogate = (out["query"] * q_all.grad[lo:hi]).sum() + (out["docs"] * d_all.grad[lo:hi]).sum()
            if use_mlm:
                # The chunk's share of the mean over all masked tokens of the big batch.
                mlm = out["mlm"] * (out["masked"] / max(n_masked, 1))
                surrogate = surrogate + loss_fn.alpha * mlm
                mlm_total = mlm_total + mlm.detach()
            surrogate.backward()
    for i, ((lo, hi), state) in enumerate(zip(neg_spans, neg_rng, strict=True), start=len(spans)):
        _set_rng_state(state, q_all.device)
        with _sync(model, sync and i == passes - 1):
            out = model({"negatives": (batch["neg_ids"][lo:hi], batch["neg_mask"][lo:hi])})
            (out["negatives"] * n_all.grad[lo:hi]).sum().backward()
    terms = {k: v.detach() for k, v in retrieval.items() if k not in ("mlm", "total")}
    return {**terms, "mlm": mlm_total, "total": retrieval["total"].detach() + loss_fn.alpha * mlm_total}


def _margins(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(owner, teacher margin) of each hard negative, when the batch has them (MarginMSE)."""
    return (batch["neg_owner"], batch["neg_margin"]) if "neg_margin" in batch else None


def _plain_backward(model: Model, batch: dict[str, torch.Tensor], loss_fn: JointLoss, labels: torch.Tensor | None,
                    domain_ids: torch.Tensor | None, sync: bool) -> Losses:
    """The whole batch in one forward and one backward pass."""
    texts = {"query": (batch["query_ids"], batch["query_mask"]), "docs": (batch["doc_ids"], batch["doc_mask"])}
    if "neg_ids" in batch:
        texts["negatives"] = (batch["neg_ids"], batch["neg_mask"])
    with _sync(model, sync):
        out = model(texts, labels, domain_ids)
        terms = loss_fn(out["query"], out["docs"], out.get("mlm"), out.get("negatives"), _margins(batch))
        terms["total"].backward()
    return {k: v.detach() for k, v in terms.items()}


def mlm_backward(model: Model, batch: dict[str, torch.Tensor], domain_ids: torch.Tensor | None,
                 chunk_size: int, sync: bool = True) -> Losses:
    """Accumulate the gradients of the MLM loss alone (the warm-up stage) on masked documents,
    ``chunk_size`` documents per forward pass; the mean is over all masked tokens of the batch."""
    n = batch["doc_ids"].shape[0]
    n_masked = int((batch["labels"] != IGNORE).sum())
    total = torch.zeros((), device=batch["doc_ids"].device)
    spans = _spans(n, chunk_size)
    for i, (lo, hi) in enumerate(spans):
        with _sync(model, sync and i == len(spans) - 1):
            out = model({"docs": (batch["doc_ids"][lo:hi], batch["doc_mask"][lo:hi])}, batch["labels"][lo:hi],
                        domain_ids)
            loss = out["mlm"] * (out["masked"] / max(n_masked, 1))
            loss.backward()  # also with nothing masked: a reducing pass must run on every rank
            total = total + loss.detach()
    return {"contrastive": torch.zeros_like(total), "mlm": total, "total": total}
