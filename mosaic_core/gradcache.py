"""Gradient caching: the gradients of a contrastive batch of thousands, in memory for a chunk.

The in-batch InfoNCE loss couples every query with every document, so a batch cannot simply
be split into accumulation steps. Gradient caching (Gao et al., 2021) does it exactly:

1. embed every chunk without building graphs (RNG state recorded per chunk);
2. compute the full-batch loss on those embeddings as leaves, and its gradient with respect
   to each embedding;
3. re-run each chunk with graphs (RNG restored, so dropout masks repeat) and backpropagate
   ``sum(embedding * cached_gradient)`` plus the chunk's share of the MLM loss.

A batch that is one chunk takes one plain forward and backward pass instead (same gradients,
no extra no-grad forward).

The parameter gradients equal those of one big-batch step (to float tolerance); peak memory
is that of one chunk plus the ``[B, d]`` embeddings.
"""

from __future__ import annotations

import torch

from mosaic_core.losses import IGNORE, JointLoss, domain_mlm_loss, full_mlm_loss
from mosaic_core.model import DualEncoder


def _rng_state(device: torch.device) -> tuple:
    """The RNG state dropout draws from on ``device`` (CPU generator, plus CUDA's on a GPU)."""
    return (torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


def _set_rng_state(state: tuple, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def _mlm(model: DualEncoder, states: torch.Tensor, targets: torch.Tensor, domain_ids: torch.Tensor | None):
    if domain_ids is None:
        return full_mlm_loss(states, targets, model.embeddings, model.head.bias)
    return domain_mlm_loss(states, targets, model.embeddings, domain_ids, model.head.bias)


def joint_backward(
    model: DualEncoder,
    batch: dict[str, torch.Tensor],
    loss_fn: JointLoss,
    domain_ids: torch.Tensor | None,
    chunk_size: int,
    use_mlm: bool = True,
) -> dict[str, float]:
    """Accumulate into ``.grad`` the gradients of ``loss_fn`` on the whole ``batch``
    (keys from :class:`~mosaic_core.model.PairCollator`), ``chunk_size`` pairs at a time.

    ``domain_ids`` None means all-token MLM; ``use_mlm`` False is the contrastive-only stage.
    Returns the loss components as floats.
    """
    n = batch["query_ids"].shape[0]
    if chunk_size >= n:  # one chunk: caching would buy no memory for its extra no-grad forward
        return _plain_backward(model, batch, loss_fn, domain_ids, use_mlm)
    spans = [(lo, min(lo + chunk_size, n)) for lo in range(0, n, chunk_size)]
    n_masked = int((batch["labels"] != IGNORE).sum()) if use_mlm else 0
    device = batch["query_ids"].device
    rng_states, q_parts, d_parts = [], [], []
    with torch.no_grad():
        for lo, hi in spans:
            rng_states.append(_rng_state(device))
            q_parts.append(model.embed(batch["query_ids"][lo:hi], batch["query_mask"][lo:hi]))
            d_parts.append(model.embed(batch["doc_ids"][lo:hi], batch["doc_mask"][lo:hi]))
    q_all = torch.cat(q_parts).requires_grad_()
    d_all = torch.cat(d_parts).requires_grad_()
    contrastive = loss_fn(q_all, d_all, None)["contrastive"]
    contrastive.backward()
    mlm_total = 0.0
    for (lo, hi), state in zip(spans, rng_states, strict=True):
        _set_rng_state(state, device)
        q = model.embed(batch["query_ids"][lo:hi], batch["query_mask"][lo:hi])
        surrogate = (q * q_all.grad[lo:hi]).sum()
        if use_mlm:
            d, states, targets = model.forward_docs(batch["doc_ids"][lo:hi], batch["doc_mask"][lo:hi],
                                                    batch["labels"][lo:hi])
            if len(targets):
                # The chunk's share of the mean over all masked tokens of the big batch.
                mlm = _mlm(model, states, targets, domain_ids) * (len(targets) / n_masked)
                surrogate = surrogate + loss_fn.alpha * mlm
                mlm_total += mlm.item()
        else:
            d = model.embed(batch["doc_ids"][lo:hi], batch["doc_mask"][lo:hi])
        surrogate = surrogate + (d * d_all.grad[lo:hi]).sum()
        surrogate.backward()
    return {"contrastive": contrastive.item(), "mlm": mlm_total,
            "total": contrastive.item() + loss_fn.alpha * mlm_total}


def _plain_backward(model: DualEncoder, batch: dict[str, torch.Tensor], loss_fn: JointLoss,
                    domain_ids: torch.Tensor | None, use_mlm: bool) -> dict[str, float]:
    """The whole batch in one forward and one backward pass."""
    q = model.embed(batch["query_ids"], batch["query_mask"])
    mlm = None
    if use_mlm:
        d, states, targets = model.forward_docs(batch["doc_ids"], batch["doc_mask"], batch["labels"])
        if len(targets):
            mlm = _mlm(model, states, targets, domain_ids)
    else:
        d = model.embed(batch["doc_ids"], batch["doc_mask"])
    out = loss_fn(q, d, mlm)
    out["total"].backward()
    return {k: v.item() for k, v in out.items()}


def mlm_backward(model: DualEncoder, batch: dict[str, torch.Tensor], domain_ids: torch.Tensor | None,
                 chunk_size: int) -> dict[str, float]:
    """Accumulate the gradients of the MLM loss alone (the warm-up stage) on masked documents,
    ``chunk_size`` documents per forward pass; the mean is over all masked tokens of the batch."""
    n = batch["doc_ids"].shape[0]
    n_masked = int((batch["labels"] != IGNORE).sum())
    total = 0.0
    for lo in range(0, n, chunk_size):
        hi = min(lo + chunk_size, n)
        _, states, targets = model.forward_docs(batch["doc_ids"][lo:hi], batch["doc_mask"][lo:hi],
                                                batch["labels"][lo:hi])
        if len(targets):
            loss = _mlm(model, states, targets, domain_ids) * (len(targets) / n_masked)
            loss.backward()
            total += loss.item()
    return {"contrastive": 0.0, "mlm": total, "total": total}
