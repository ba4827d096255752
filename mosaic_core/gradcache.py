"""Gradient caching: the gradients of a contrastive batch of thousands, in memory for a chunk.

The in-batch InfoNCE loss couples every query with every document, so a batch cannot simply
be split into accumulation steps. Gradient caching (Gao et al., 2021) does it exactly:

1. embed every chunk without building graphs (RNG state recorded per chunk);
2. compute the full-batch loss on those embeddings as leaves, and its gradient with respect
   to each embedding;
3. re-run each chunk with graphs (RNG restored, so dropout masks repeat) and backpropagate
   ``sum(embedding * cached_gradient)`` plus the chunk's share of the MLM loss.

The parameter gradients equal those of one big-batch step (to float tolerance); peak memory
is that of one chunk plus the ``[B, d]`` embeddings.
"""

from __future__ import annotations

import torch

from mosaic_core.losses import IGNORE, JointLoss, domain_mlm_loss, full_mlm_loss
from mosaic_core.model import DualEncoder


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
    spans = [(lo, min(lo + chunk_size, n)) for lo in range(0, n, chunk_size)]
    n_masked = int((batch["labels"] != IGNORE).sum()) if use_mlm else 0
    rng_states, q_parts, d_parts = [], [], []
    with torch.no_grad():
        for lo, hi in spans:
            rng_states.append(torch.get_rng_state())
            q_parts.append(model.embed(batch["query_ids"][lo:hi], batch["query_mask"][lo:hi]))
            d_parts.append(model.embed(batch["doc_ids"][lo:hi], batch["doc_mask"][lo:hi]))
    q_all = torch.cat(q_parts).requires_grad_()
    d_all = torch.cat(d_parts).requires_grad_()
    contrastive = loss_fn(q_all, d_all, None)["contrastive"]
    contrastive.backward()
    mlm_total = 0.0
    for (lo, hi), state in zip(spans, rng_states, strict=True):
        torch.set_rng_state(state)
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
