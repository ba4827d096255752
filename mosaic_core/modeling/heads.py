"""Masked-LM heads in Hugging Face checkpoints: whether a checkpoint ships one, and where its
transform lives in each layout (BERT's ``cls.predictions.transform``, RoBERTa's ``lm_head``).
The one place that knows checkpoint layouts; stage 1, the dual encoder and the sparse kind ask it."""

from __future__ import annotations

import torch
from torch import nn


def checkpoint_transform(mlm: nn.Module) -> tuple[nn.Linear, nn.LayerNorm]:
    """The (dense, LayerNorm) of a BERT-style (``cls.predictions.transform``) or RoBERTa-style
    (``lm_head``) masked-LM head."""
    if hasattr(mlm, "cls"):
        t = mlm.cls.predictions.transform
        return t.dense, t.LayerNorm
    if hasattr(mlm, "lm_head"):
        return mlm.lm_head.dense, mlm.lm_head.layer_norm
    raise ValueError(f"unknown MLM head layout in {type(mlm).__name__}; supported: BERT and RoBERTa families")


def masked_lm_with_head(resolved: str) -> torch.nn.Module | None:
    """The checkpoint as ``*ForMaskedLM`` (float32) if it ships MLM head weights, else ``None``."""
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a missing head is the answer we ask for, not a warning
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(resolved, dtype=torch.float32, output_loading_info=True)
    except ValueError:  # no masked-LM class for this architecture
        return None
    finally:
        hf_logging.set_verbosity(verbosity)
    if info["missing_keys"]:  # the head was initialised fresh: the checkpoint has none
        return None
    return model
