"""Stage 2/3 maths on tensors: InfoNCE, domain-restricted MLM, document masking (docs/method.md).

Split from "run the model" so each piece is tested against a naive reference on hand-made
tensors. Nothing here logs; the contrastive loss gathers documents across ranks only when
``torch.distributed`` is initialised.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mosaic_core.config_train import StageConfig
from mosaic_core.modeling import sparse

IGNORE = -100


def _gather_with_grad(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """All ranks' ``x`` concatenated, and this rank's offset. The gather is differentiable: each
    rank's loss sends gradient to every rank's shard, so the step's gradient, averaged over
    ranks, is that of the whole batch on one process."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return x, 0
    from torch.distributed.nn.functional import all_gather  # imported only where ranks exist

    parts = all_gather(x.contiguous())
    return torch.cat(parts), torch.distributed.get_rank() * x.shape[0]


def info_nce(
    queries: torch.Tensor,
    docs: torch.Tensor,
    scale: float = 50.0,
    symmetric: bool = False,
    hard_negatives: torch.Tensor | None = None,
    normalize: bool = True,
) -> torch.Tensor:
    """InfoNCE over in-batch negatives (eq. 4) on L2-normalised embeddings (``normalize``; the
    raw dot product without: SPLADE's relevance).

    ``queries``, ``docs``: ``[B, d]``, row i of each forms a positive pair; ``hard_negatives``
    ``[B', d]`` are extra columns for every query (of this rank, under ``torch.distributed``).
    ``scale`` is the fixed logit scale (1/τ; the authors used 50). ``symmetric`` averages the
    query→doc and doc→query directions.
    """
    def unit(x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x.float(), dim=-1) if normalize else x.float()

    q, d = unit(queries), unit(docs)
    d_all, offset = _gather_with_grad(d)
    # Hard negatives stay on their rank (a rank's share can be any size, even none).
    columns = d_all if hard_negatives is None else torch.cat([d_all, unit(hard_negatives)])
    labels = torch.arange(q.shape[0], device=q.device) + offset
    loss = F.cross_entropy(scale * q @ columns.T, labels)
    if symmetric:
        q_all, _ = _gather_with_grad(q)
        loss = (loss + F.cross_entropy(scale * d @ q_all.T, labels)) / 2
    return loss


def matryoshka_info_nce(
    queries: torch.Tensor,
    docs: torch.Tensor,
    dims: tuple[int, ...],
    weights: tuple[float, ...] | None = None,
    scale: float = 50.0,
    symmetric: bool = False,
    hard_negatives: torch.Tensor | None = None,
) -> torch.Tensor:
    """Matryoshka InfoNCE: ``sum_k weights[k] * info_nce`` on the first ``dims[k]`` components of
    every embedding, each prefix renormalised (sentence-transformers' MatryoshkaLoss around
    MultipleNegativesRankingLoss), so the model can be cut to any of ``dims``.

    ``queries``, ``docs``: ``[B, h]``; ``hard_negatives``: ``[B', h]``; every ``dims[k] <= h``.
    ``weights`` default to 1 each. Each term gathers documents across ranks like
    :func:`info_nce`, so gradient caching and several ranks need nothing more.
    """
    if max(dims) > queries.shape[-1]:
        raise ValueError(f"matryoshka dims {list(dims)} exceed the embedding size {queries.shape[-1]}")
    weights = weights if weights is not None else (1.0,) * len(dims)
    return sum(w * info_nce(queries[:, :d], docs[:, :d], scale, symmetric,
                            None if hard_negatives is None else hard_negatives[:, :d])
               for d, w in zip(dims, weights, strict=True))


def margin_mse(queries: torch.Tensor, docs: torch.Tensor, negatives: torch.Tensor, owner: torch.Tensor,
               margins: torch.Tensor, scale: float = 50.0) -> torch.Tensor:
    """MarginMSE (Hofstätter et al. 2020; GPL's loss, Wang et al. 2022): the mean squared error
    between the student's margins and a teacher's, one per hard negative.

    ``queries``, ``docs``: ``[B, d]`` (row i of each a positive pair); ``negatives``: ``[N, d]``,
    negative j belonging to pair ``owner[j]`` (``[N]`` long); ``margins``: ``[N]``, the teacher's
    score of (query, positive) minus its score of (query, negative j) — a cross-encoder's logits.
    The student scores with ``scale`` × the cosine of L2-normalised embeddings (the similarity a
    dense model here is trained and served with; ``scale`` brings the cosine's range of 2 to a
    logit's), so its margin is ``scale·(cos(q, d) − cos(q, n_j))``. No negative in the batch:
    a zero that keeps the graph."""
    q, d, n = (F.normalize(x.float(), dim=-1) for x in (queries, docs, negatives))
    if n.shape[0] == 0:
        return (q.sum() + d.sum()) * 0.0
    q_own = q[owner]
    student = scale * ((q_own * d[owner]).sum(-1) - (q_own * n).sum(-1))
    return F.mse_loss(student, margins.float())


def domain_lookup(domain_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``[V]`` long: position of each vocabulary id in V_D, ``IGNORE`` for non-domain ids."""
    lookup = torch.full((vocab_size,), IGNORE, dtype=torch.long, device=domain_ids.device)
    lookup[domain_ids] = torch.arange(len(domain_ids), device=domain_ids.device)
    return lookup


def domain_mlm_loss(
    states: torch.Tensor,
    targets: torch.Tensor,
    embeddings: torch.Tensor,
    domain_ids: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Domain-restricted MLM (eq. 5): softmax over the |V_D| domain rows only.

    ``states``: ``[N, h]`` transformed hidden states at the masked positions; ``targets``:
    ``[N]`` vocabulary ids (all in V_D); ``embeddings``: the tied ``[V, h]`` input embedding
    matrix; ``domain_ids``: ``[|V_D|]``. Only the gathered ``[|V_D|, h]`` rows enter the
    product, so the cost scales with |V_D| — equal to the authors' full-vocabulary logits
    with non-domain columns set to -inf.
    """
    if states.shape[0] == 0:
        return states.sum() * 0.0  # no masked domain token in this batch
    weight = embeddings[domain_ids]
    logits = states.float() @ weight.float().T
    if bias is not None:
        logits = logits + bias[domain_ids].float()
    remapped = domain_lookup(domain_ids, embeddings.shape[0])[targets]
    if (remapped == IGNORE).any():
        raise ValueError("domain MLM targets must be domain tokens; mask only V_D positions")
    return F.cross_entropy(logits, remapped)


def full_mlm_loss(states: torch.Tensor, targets: torch.Tensor, embeddings: torch.Tensor,
                  bias: torch.Tensor | None = None) -> torch.Tensor:
    """All-token MLM (the ablation): softmax over the whole vocabulary."""
    if states.shape[0] == 0:
        return states.sum() * 0.0
    logits = states.float() @ embeddings.float().T
    if bias is not None:
        logits = logits + bias.float()
    return F.cross_entropy(logits, targets)


def mask_tokens(
    input_ids: torch.Tensor,
    candidates: torch.Tensor,
    mask_token_id: int,
    random_ids: torch.Tensor,
    probability: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking restricted to ``candidates``.

    ``input_ids``, ``candidates`` (bool: maskable positions — domain tokens, never specials or
    padding): ``[B, T]``. Each candidate is selected with ``probability``; selected positions
    become ``[MASK]`` (80 %), a random id drawn from ``random_ids`` (10 %) or stay (10 %).
    Returns (masked ids, labels) with labels ``IGNORE`` wherever nothing was selected.
    """
    def rand(shape: torch.Size) -> torch.Tensor:
        return torch.rand(shape, generator=generator, device="cpu").to(input_ids.device)

    selected = candidates & (rand(input_ids.shape) < probability)
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE))
    roll = rand(input_ids.shape)
    masked = input_ids.clone()
    masked[selected & (roll < 0.8)] = mask_token_id
    to_random = selected & (roll >= 0.8) & (roll < 0.9)
    picks = torch.randint(len(random_ids), input_ids.shape, generator=generator, device="cpu").to(input_ids.device)
    masked[to_random] = random_ids[picks[to_random]]
    return masked, labels


LOSS_TERMS: tuple[str, ...] = ("mlm", "contrastive", "margin_mse", "flops")
"""Every term :class:`JointLoss` can return besides ``total``, in the order shown: the progress
bar, the log, the Prefect progress artifact, the stage table, the run report's curves and the
trackers read this tuple, so a new term is declared here, and in :func:`loss_terms`, only."""


def loss_terms(stage: StageConfig) -> list[str]:
    """The terms of :data:`LOSS_TERMS` that ``stage`` computes (its bar and log show only these)."""
    margins = stage.objective == "margin_mse"
    on = {"mlm": stage.kind == "mlm" or (stage.kind == "joint" and stage.alpha > 0),
          "contrastive": stage.kind != "mlm" and not margins,
          "margin_mse": stage.kind != "mlm" and margins,
          "flops": stage.kind != "mlm" and stage.model_kind == "sparse"}
    return [t for t in LOSS_TERMS if on[t]]


class JointLoss(nn.Module):
    """``total = alpha * mlm + contrastive``; returns the components, never logs.

    ``objective`` ``margin_mse`` replaces the contrastive term by :func:`margin_mse` on the hard
    negatives and the teacher's margins (the term ``"margin_mse"``; no in-batch negatives).

    ``flops`` (λ_query, λ_document) makes it SPLADE's loss (:mod:`mosaic_core.modeling.sparse`): the
    contrastive term on raw dot products at scale 1, plus ``"flops"``, the FLOPS regulariser
    λ_q·FLOPS(queries) + λ_d·FLOPS(documents and hard negatives), in ``total``.

    ``matryoshka`` (dims, weights or None) makes the contrastive term :func:`matryoshka_info_nce`."""

    def __init__(self, alpha: float = 0.3, scale: float = 50.0, symmetric: bool = False,
                 flops: tuple[float, float] | None = None,
                 matryoshka: tuple[tuple[int, ...], tuple[float, ...] | None] | None = None,
                 objective: str = "infonce"):
        super().__init__()
        if flops is not None and matryoshka is not None:
            raise ValueError("Matryoshka dimensions truncate dense embeddings; a sparse (FLOPS) loss has none")
        if objective == "margin_mse" and (flops is not None or matryoshka is not None):
            raise ValueError("margin_mse scores dense, whole embeddings; it has no sparse or Matryoshka form here")
        self.alpha, self.scale, self.symmetric, self.flops = alpha, scale, symmetric, flops
        self.matryoshka, self.objective = matryoshka, objective

    def forward(self, queries: torch.Tensor, docs: torch.Tensor, mlm: torch.Tensor | None,
                hard_negatives: torch.Tensor | None = None,
                margins: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """``margins``: (owner ``[N]``, teacher margins ``[N]``) of the ``hard_negatives``; needed by
        (and only read by) the ``margin_mse`` objective."""
        if self.objective == "margin_mse":
            if hard_negatives is None:  # a batch whose pairs have no negative: nothing to distil
                hard_negatives, margins = queries[:0], (queries.new_zeros(0, dtype=torch.long), queries.new_zeros(0))
            if margins is None:
                raise ValueError("the margin_mse objective needs the teacher's margin of every hard negative")
            term = margin_mse(queries, docs, hard_negatives, *margins, self.scale)
            mlm = mlm if mlm is not None else term.new_zeros(())
            return {"total": self.alpha * mlm + term, "mlm": mlm, "margin_mse": term}
        if self.matryoshka is not None:
            contrastive = matryoshka_info_nce(queries, docs, *self.matryoshka, self.scale, self.symmetric,
                                              hard_negatives)
            regulariser = None
        elif self.flops is None:
            contrastive = info_nce(queries, docs, self.scale, self.symmetric, hard_negatives)
            regulariser = None
        else:
            contrastive = info_nce(queries, docs, 1.0, self.symmetric, hard_negatives, normalize=False)
            all_docs = docs if hard_negatives is None else torch.cat([docs, hard_negatives])
            regulariser = self.flops[0] * sparse.flops(queries) + self.flops[1] * sparse.flops(all_docs)
        mlm = mlm if mlm is not None else contrastive.new_zeros(())
        total = self.alpha * mlm + contrastive + (0 if regulariser is None else regulariser)
        out = {"total": total, "mlm": mlm, "contrastive": contrastive}
        return out if regulariser is None else {**out, "flops": regulariser}
