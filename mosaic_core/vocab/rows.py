"""The new tokens' rows: the embedding matrix (and MLM bias) grown, each new row the mean of
the base rows of its pieces (step 4 of :mod:`mosaic_core.vocab.build`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


@torch.no_grad()
def mean_init_rows(weight: torch.Tensor, piece_ids: Sequence[Sequence[int]]) -> torch.Tensor:
    """Rows for new tokens: the mean of the given rows of ``weight`` (shape ``[V, d]``).

    Returns a ``[len(piece_ids), d]`` tensor in ``weight``'s dtype (mean computed in fp32).
    """
    if not piece_ids:
        return weight.new_zeros((0, weight.shape[1]))
    return torch.stack([weight[list(ids)].float().mean(0) for ids in piece_ids]).to(weight.dtype)


@torch.no_grad()
def expand_embeddings(
    model: torch.nn.Module, new_ids: Sequence[int], piece_ids: Sequence[Sequence[int]], new_size: int
) -> None:
    """Grow ``model``'s input embeddings to ``new_size`` rows: row ``new_ids[i]`` becomes the
    mean of the base rows ``piece_ids[i]``; every old row is copied bit for bit."""
    old = model.get_input_embeddings().weight.detach().clone()
    new_rows = mean_init_rows(old, piece_ids)
    model.resize_token_embeddings(new_size, mean_resizing=False)
    weight = model.get_input_embeddings().weight
    weight[: old.shape[0]] = old
    weight[list(new_ids)] = new_rows
    if hasattr(model.config, "vocab_size"):
        model.config.vocab_size = new_size


def expand_mlm_bias(bias: torch.Tensor, piece_ids: Sequence[Sequence[int]]) -> torch.Tensor:
    """An MLM decoder bias ``[V]`` grown like the embeddings: new entries are the mean bias of
    their base pieces, so a new token starts with the prior of the pieces it replaces."""
    extra = torch.stack([bias[list(ids)].float().mean() for ids in piece_ids]).to(bias.dtype)
    return torch.cat([bias.detach(), extra])
