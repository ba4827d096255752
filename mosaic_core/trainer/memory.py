"""How many pairs one forward pass may hold. A batch whose activations would not fit the stage's
activation budget is split into gradient-caching chunks (:mod:`mosaic_core.trainer.gradcache`):
the contrastive batch, and so the loss and its gradients, stay the same; only the memory of one
pass shrinks.

The estimate is Korthikanti et al. (2022)'s count of what a transformer layer keeps for its backward
pass, ``s·h·(34 + 5·a·s/h)`` bytes per sequence of ``s`` tokens at 16 bits (hidden size ``h``,
``a`` heads), doubled: autocast keeps LayerNorm, softmax and the residual stream in fp32, and
dropout its masks. ``python bench/train_memory.py`` on the 2-core VM (MiniLM-L6, (64, 256) tokens,
bf16 autocast, batch 32): each pair in a pass added 97–100 MiB to the step's peak (chunks of 32,
16 and 8: 3,932, 2,324 and 1,551 MiB above the built stage; the rest is the optimizer's state and
the gradients); this estimates 96.
"""

from __future__ import annotations

import logging

import torch

from mosaic_core.config import StageConfig

log = logging.getLogger(__name__)

CPU_BUDGET_GIB = 0.75
"""A CPU stage's default activation budget: with MiniLM, chunks of 8 pairs, and a whole
``mosaic train`` (Prefect's server included) under 3 GB whatever the batch size and the number
of pairs (``bench/scale.py``)."""
GPU_SHARE = 0.8
"""A GPU stage's default budget: this share of the memory free once the model and optimizer are built."""


def sequence_bytes(config, tokens: int) -> int:
    """Activation bytes one sequence of ``tokens`` keeps for the backward pass of the encoder."""
    h, heads, layers = config.hidden_size, config.num_attention_heads, config.num_hidden_layers
    return int(2 * layers * tokens * h * (34 + 5 * heads * tokens / h))


def budget_bytes(stage: StageConfig, device: torch.device) -> int:
    """The stage's activation budget: ``activation_gib`` when set, else :data:`CPU_BUDGET_GIB` on a
    CPU and :data:`GPU_SHARE` of the free memory on a GPU."""
    if stage.activation_gib is not None:
        return int(stage.activation_gib * 2**30)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(GPU_SHARE * free)
    return int(CPU_BUDGET_GIB * 2**30)


def choose_chunk(stage: StageConfig, config, lengths, batch_size: int, device: torch.device) -> int:
    """Pairs per forward pass: ``stage.chunk_size`` when set; else the whole batch when its
    queries, documents and hard negatives fit the budget together, or the most pairs (query and
    document; negatives are passed apart, as many at a time) that fit. ``lengths``: the stage's
    (query, document) token caps."""
    if stage.chunk_size is not None:
        return stage.chunk_size
    pair = sequence_bytes(config, lengths.query) + sequence_bytes(config, lengths.document)
    negatives = stage.hard_negatives * sequence_bytes(config, lengths.document)
    budget = budget_bytes(stage, device)
    if batch_size * (pair + negatives) <= budget:
        return batch_size * max(1, stage.hard_negatives)  # the whole batch, negatives included, in one pass
    chunk = max(1, min(batch_size, budget // pair))
    log.info("stage %s: a batch of %d pairs would keep about %.1f GiB of activations, over the %.1f GiB budget: "
             "%d pairs per forward pass (gradient caching: the same loss; set chunk_size or activation_gib "
             "to choose)", stage.name, batch_size, batch_size * (pair + negatives) / 2**30, budget / 2**30, chunk)
    return chunk
