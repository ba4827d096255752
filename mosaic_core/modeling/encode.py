"""Sentence embeddings from any Hugging Face encoder, for the consistency filter and evaluation.

Pooling and normalisation come from the model's sentence-transformers files when it has them
(``1_Pooling/config.json``, a ``Normalize`` module in ``modules.json``) and from explicit
arguments otherwise. Texts are encoded in order of token length, so a batch pads to its own
longest text, and results come back in input order. A query or a document gets the model's
prompt in front (:mod:`mosaic_core.modeling.prompts`: what the model declares, or an override).
On CUDA, and on CPUs with native bf16 (AVX512-BF16 / AMX), the forward pass runs under bf16
autocast; pooling and normalisation run in fp32.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoModel, AutoTokenizer

from mosaic_core.modeling.prompts import Kind, Prompts, resolve_prompts
from mosaic_core.modeling.refs import resolve_model
from mosaic_core.modeling.sparse import is_sparse_module

log = logging.getLogger(__name__)

Pooling = Literal["mean", "cls"]
Precision = Literal["auto", "fp32", "bf16", "fp16"]
GPU_BATCH_TOKENS = 131_072  # padded tokens per encoding batch on CUDA unless told otherwise


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (otherwise bf16 autocast is slower than fp32)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(precision: Precision, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device`` (``None``: plain fp32)."""
    if precision == "fp32":
        return None
    if precision == "fp16":
        if device.type != "cuda":
            raise ValueError("fp16 autocast is for CUDA devices; use bf16 or fp32 on CPU")
        return torch.float16
    if precision == "bf16":
        return torch.bfloat16
    if device.type == "cuda":
        return torch.bfloat16
    return torch.bfloat16 if cpu_has_bf16() else None


def read_st_pooling(model_dir: str) -> tuple[Pooling | None, bool | None]:
    """(pooling, normalize) declared by a sentence-transformers model directory, if any."""
    root = Path(model_dir)
    modules = root / "modules.json"
    if not modules.is_file():
        return None, None
    entries = json.loads(modules.read_text())
    normalize = any(e.get("type", "").endswith("Normalize") for e in entries)
    pooling: Pooling | None = None
    for e in entries:
        if e.get("type", "").endswith("Pooling") and not is_sparse_module(e):  # SpladePooling: no states
            cfg = json.loads((root / e["path"] / "config.json").read_text())
            # sentence-transformers < 6 writes pooling_mode_*_token(s) flags; 6.x writes pooling_mode.
            if cfg.get("pooling_mode_cls_token") or cfg.get("pooling_mode") == "cls":
                pooling = "cls"
            elif cfg.get("pooling_mode_mean_tokens") or cfg.get("pooling_mode") == "mean":
                pooling = "mean"
            else:
                raise ValueError(f"{root}: unsupported pooling {cfg}; MOSAIC supports mean and CLS")
    return pooling, normalize


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """``[B, T, d]`` token states + ``[B, T]`` attention mask → ``[B, d]`` fp32 embeddings."""
    hidden = hidden.float()
    if pooling == "cls":
        return hidden[:, 0]
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def max_positions(config) -> int:
    """The longest input (in tokens, specials included) the model's position embeddings take.
    RoBERTa-family models start positions after the padding id, which costs ``pad + 1`` slots."""
    limit = getattr(config, "max_position_embeddings", None) or 1 << 30
    if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        limit -= (config.pad_token_id or 0) + 1
    return limit


@dataclass
class Encoder:
    """``Encoder.load(model)`` then ``encode(texts, kind="query") -> float32 [n, d]``."""

    model: torch.nn.Module
    tokenizer: object
    pooling: Pooling
    normalize: bool
    device: torch.device
    autocast_dtype: torch.dtype | None
    max_length: int = 256
    batch_tokens: int | None = None
    prompts: Prompts = Prompts()

    @classmethod
    def load(
        cls,
        model: str,
        pooling: Pooling | None = None,
        normalize: bool | None = None,
        max_length: int = 256,
        precision: Precision = "auto",
        device: str = "auto",
        batch_tokens: int | None = None,
        prompts: object | None = None,
    ) -> Encoder:
        """``batch_tokens``: padded tokens per batch instead of a number of texts (see
        :meth:`encode`); default: :data:`GPU_BATCH_TOKENS` on CUDA, a number of texts on CPU.
        ``prompts``: a ``PromptsConfig`` overriding what the model declares."""
        resolved = resolve_model(model)
        st_pooling, st_normalize = read_st_pooling(resolved) if Path(resolved).is_dir() else (None, None)
        dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                           ("cpu" if device == "auto" else device))
        net = AutoModel.from_pretrained(resolved).to(dev).eval()
        tok = AutoTokenizer.from_pretrained(resolved)
        return cls(net, tok, pooling or st_pooling or "mean",
                   normalize if normalize is not None else bool(st_normalize), dev,
                   resolve_precision(precision, dev), min(max_length, max_positions(net.config)),
                   batch_tokens or (GPU_BATCH_TOKENS if dev.type == "cuda" else None),
                   resolve_prompts(resolved, prompts))

    def with_max_length(self, max_length: int) -> Encoder:
        """This encoder truncating at ``max_length`` tokens (at most the model's positions)."""
        return dataclasses.replace(self, max_length=min(max_length, max_positions(self.model.config)))

    @torch.inference_mode()
    def encode(self, texts: list[str], batch_size: int = 64, progress: bool = False,
               kind: Kind | None = None) -> np.ndarray:
        """Embeddings of ``texts`` in input order, ``float32 [len(texts), d]``; ``kind`` ``query``
        or ``document`` puts that prompt in front of each text.

        Texts go longest first, so an out-of-memory shows on the first batch. A batch holds
        ``batch_size`` texts, or with ``batch_tokens`` set as many texts as fit that many padded
        tokens (short texts make big batches: the GPU setting). On out-of-memory the batch
        size or token budget halves and the batch is retried."""
        max_tokens = self.batch_tokens
        texts = self.prompts.apply(texts, kind)
        lengths = np.asarray([len(ids) for ids in self.tokenizer(
            texts, truncation=True, max_length=self.max_length, add_special_tokens=True)["input_ids"]])
        order = np.argsort(lengths, kind="stable")[::-1]
        out = np.empty((len(texts), self.model.config.hidden_size), dtype=np.float32)
        pos = 0
        with tqdm(total=len(texts), desc="encode", unit="text", disable=None if progress else True) as bar:
            while pos < len(order):
                size = batch_size if max_tokens is None else max(1, max_tokens // int(lengths[order[pos]]))
                idx = order[pos : pos + size]
                try:
                    out[idx] = self._embed([texts[i] for i in idx])
                except torch.OutOfMemoryError:
                    if len(idx) == 1:
                        raise
                    if max_tokens is None:
                        batch_size = len(idx) // 2
                    else:
                        max_tokens //= 2
                    log.warning("out of memory on %d texts: retrying with batches of %s", len(idx),
                                f"{batch_size} texts" if max_tokens is None else f"{max_tokens} tokens")
                    if self.device.type == "cuda":
                        torch.cuda.empty_cache()
                    continue
                pos += len(idx)
                bar.update(len(idx))
        return out

    def _embed(self, texts: list[str]) -> np.ndarray:
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                               return_tensors="pt").to(self.device)
        with torch.autocast(self.device.type, dtype=self.autocast_dtype or torch.float32,
                            enabled=self.autocast_dtype is not None):
            hidden = self.model(**batch).last_hidden_state
        emb = pool(hidden, batch["attention_mask"], self.pooling)
        if self.normalize:
            emb = torch.nn.functional.normalize(emb, dim=-1)
        return emb.float().cpu().numpy()
