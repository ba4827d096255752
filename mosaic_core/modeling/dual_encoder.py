"""The trainable model of stages 2–3: a Hugging Face encoder + pooling + a tied MLM head,
and the collator that builds (query, masked document) batches.

The MLM head is BERT's: ``dense → activation → LayerNorm`` then a decoder whose weight *is*
the encoder's input embedding matrix (read at call time, never copied) plus a bias. A
checkpoint's own head (``*ForMaskedLM`` weights) is loaded when it has one; otherwise the
transform starts fresh and :func:`build_model` says so.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import AutoModel, PreTrainedTokenizerBase
from transformers.activations import ACT2FN

from mosaic_core.modeling.encode import Pooling, pool, read_st_pooling
from mosaic_core.modeling.heads import checkpoint_transform, masked_lm_with_head
from mosaic_core.modeling.losses import IGNORE, domain_mlm_loss, full_mlm_loss, mask_tokens
from mosaic_core.modeling.modeldir import load_head, save_head
from mosaic_core.modeling.prompts import Prompts, prompt_positions
from mosaic_core.modeling.refs import resolve_model
from mosaic_core.modeling.sparse import ModelKind, save_sparse, splade


class MLMHead(nn.Module):
    """BERT-style transform + bias; the decoder weight is passed in (tied embeddings)."""

    def __init__(self, hidden: int, vocab_size: int, activation: str = "gelu", eps: float = 1e-12):
        super().__init__()
        self.config = {"activation": activation, "eps": eps}
        self.dense = nn.Linear(hidden, hidden)
        self.act = ACT2FN[activation]
        self.norm = nn.LayerNorm(hidden, eps=eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def transform(self, states: torch.Tensor) -> torch.Tensor:
        """``[N, h]`` hidden states → ``[N, h]`` inputs of the (tied) decoder."""
        return self.norm(self.act(self.dense(states)))


class DualEncoder(nn.Module):
    """Encoder + pooling (+ MLM head). ``embed`` for queries; ``forward_docs`` for masked
    documents, returning the pooled embedding and the transformed states at masked positions
    from one forward pass; ``forward`` for a training pass (everything one backward needs).

    ``kind`` ``sparse`` (SPLADE, :mod:`mosaic_core.modeling.sparse`): a text's representation is the
    max-pooled ``log(1 + ReLU)`` of the MLM head's logits, ``[B, V]``, not its pooled states."""

    def __init__(self, encoder: nn.Module, pooling: Pooling, head: MLMHead | None, kind: ModelKind = "dense"):
        super().__init__()
        self.encoder, self.pooling, self.head, self.kind = encoder, pooling, head, kind
        if kind == "sparse" and head is None:
            raise ValueError("a sparse (SPLADE) model represents texts by its MLM head's logits: "
                             "build it with the head")

    @property
    def embeddings(self) -> torch.Tensor:
        """The ``[V, h]`` input embedding matrix, which is also the MLM decoder weight."""
        return self.encoder.get_input_embeddings().weight

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.represent(hidden, attention_mask)

    def represent(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``[B, T, h]`` states → ``[B, d]`` pooled embeddings, or ``[B, V]`` SPLADE weights."""
        if self.kind == "sparse":
            logits = self.head.transform(hidden) @ self.embeddings.T + self.head.bias
            return splade(logits, attention_mask)
        return pool(hidden, attention_mask, self.pooling)

    def forward(self, texts: dict[str, tuple[torch.Tensor, torch.Tensor]], labels: torch.Tensor | None = None,
                domain_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """One training pass — the unit a backward pass (and DistributedDataParallel's gradient
        reduction) covers: the pooled embedding of each named ``(ids, mask)`` of ``texts``. With
        ``labels`` (masked positions of ``texts["docs"]``) also ``"mlm"``, the masked-token loss
        (over V_D with ``domain_ids``, else over the whole vocabulary; a zero still tied to the
        head when nothing is masked), and ``"masked"``, the number of masked tokens."""
        out: dict = {}
        for name, (ids, mask) in texts.items():
            if name == "docs" and labels is not None:
                out[name], states, targets = self.forward_docs(ids, mask, labels)
                out["masked"] = len(targets)
                out["mlm"] = self.mlm_loss(states, targets, domain_ids)
            else:
                out[name] = self.embed(ids, mask)
        return out

    def mlm_loss(self, states: torch.Tensor, targets: torch.Tensor, domain_ids: torch.Tensor | None) -> torch.Tensor:
        """The MLM loss of transformed ``states`` against ``targets``: domain-restricted (eq. 5)
        with ``domain_ids``, over the whole vocabulary without."""
        if domain_ids is None:
            return full_mlm_loss(states, targets, self.embeddings, self.head.bias)
        return domain_mlm_loss(states, targets, self.embeddings, domain_ids, self.head.bias)

    def forward_docs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(pooled ``[B, d]``, transformed states ``[N, h]`` at labelled positions, targets ``[N]``)."""
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        pooled = self.represent(hidden, attention_mask)
        selected = labels != IGNORE
        if self.head is None:
            raise ValueError("this model was built without an MLM head")
        return pooled, self.head.transform(hidden[selected]), labels[selected]


def ships_mlm_head(model: str) -> bool:
    """Whether :func:`build_model` loads an MLM head for ``model`` (a stage's saved head, or the
    checkpoint's own ``*ForMaskedLM`` weights) rather than starting one fresh."""
    resolved = resolve_model(model)
    return load_head(resolved) is not None or masked_lm_with_head(resolved) is not None


def build_model(model: str, pooling: Pooling | None = None, with_mlm: bool = True,
                kind: ModelKind = "dense") -> tuple[DualEncoder, bool]:
    """(model, whether the MLM head came from the checkpoint); ``kind`` ``sparse`` needs the head.

    The head is taken, in order, from a MOSAIC stage output's ``mlm_head.safetensors``, from
    the checkpoint's own ``*ForMaskedLM`` weights, or initialised fresh (the caller says so where
    it matters: a stage that trains the MLM).
    Weights load in float32 whatever the checkpoint stores (many hub models ship fp16/bf16):
    they are the optimizer's master weights; bf16 enters only through autocast."""

    resolved = resolve_model(model)
    st_pooling, _ = read_st_pooling(resolved)
    saved = load_head(resolved) if with_mlm else None
    if saved is not None:
        weights, cfg = saved
        encoder = AutoModel.from_pretrained(resolved, dtype=torch.float32)
        head = MLMHead(encoder.config.hidden_size, encoder.get_input_embeddings().weight.shape[0], **cfg)
        head.load_state_dict(weights)
        return DualEncoder(encoder, pooling or st_pooling or "mean", head, kind), True
    mlm = masked_lm_with_head(resolved) if with_mlm else None
    encoder = mlm.base_model if mlm is not None else AutoModel.from_pretrained(resolved, dtype=torch.float32)
    cfg = encoder.config
    head = None
    if with_mlm:
        head = MLMHead(cfg.hidden_size, encoder.get_input_embeddings().weight.shape[0],
                       getattr(cfg, "hidden_act", "gelu"), getattr(cfg, "layer_norm_eps", 1e-12))
        if mlm is not None:
            dense, norm = checkpoint_transform(mlm)
            head.dense.load_state_dict(dense.state_dict())
            head.norm.load_state_dict(norm.state_dict())
            head.bias.data.copy_(mlm.get_output_embeddings().bias.data)
    return DualEncoder(encoder, pooling or st_pooling or "mean", head, kind), mlm is not None


def save_model(model: DualEncoder, template: str, out_dir: Path) -> None:
    """Write ``model`` as a sentence-transformers model directory (modules, pooling and
    tokenizer from ``template``, the stage's input model; weights from ``model``) that
    ``SentenceTransformer``/``AutoModel`` load directly, with the MLM head beside it as
    ``mlm_head.safetensors`` for the next stage. A sparse model is written as a
    ``SparseEncoder`` directory instead, its head inside the masked-LM checkpoint."""
    from sentence_transformers import SentenceTransformer

    if model.kind == "sparse":
        save_sparse(model.encoder, model.head, resolve_model(template), out_dir)
        return
    st = SentenceTransformer(resolve_model(template), device="cpu")
    st[0].auto_model.load_state_dict({k: v.detach().cpu() for k, v in model.encoder.state_dict().items()})
    out_dir.mkdir(parents=True, exist_ok=True)
    st.save(str(out_dir))
    if model.head is not None:
        save_head(out_dir, model.head.state_dict(), model.head.config)


@dataclass
class PairCollator:
    """(query, document, *hard negatives) texts → tokenised queries, documents masked at domain
    tokens, and up to ``negatives`` hard-negative documents per pair (never masked). Each text
    gets its ``prompts`` prefix first; a document's prompt tokens are never masked.

    ``domain_ids`` None selects all-token masking (the ablation): any non-special token."""

    tokenizer: PreTrainedTokenizerBase
    domain_ids: torch.Tensor | None
    query_max_length: int = 64
    document_max_length: int = 256
    mlm_probability: float = 0.15
    generator: torch.Generator | None = None
    negatives: int = 0
    prompts: Prompts = Prompts()
    pad_to_multiple_of: int | None = None

    def __post_init__(self) -> None:
        vocab = len(self.tokenizer)
        specials = torch.tensor(sorted(set(self.tokenizer.all_special_ids)))
        self._special = torch.zeros(vocab, dtype=torch.bool)
        self._special[specials] = True
        self._random_ids = (~self._special).nonzero().squeeze(1)
        self._candidate = ~self._special if self.domain_ids is None else torch.zeros(vocab, dtype=torch.bool)
        if self.domain_ids is not None:
            self._candidate[self.domain_ids] = True
            self._candidate &= ~self._special
        self._prompt_positions = prompt_positions(self.tokenizer, self.prompts.document)
        self._encoders = {n: _fixed_encoder(self.tokenizer, n, self.pad_to_multiple_of)
                          for n in {self.query_max_length, self.document_max_length}}

    def _encode(self, texts: list[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        encoder = self._encoders[max_length]
        if encoder is None:
            enc = self.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt",
                                 pad_to_multiple_of=self.pad_to_multiple_of)
            return enc["input_ids"], enc["attention_mask"]
        rows = encoder.encode_batch(texts)
        return (torch.from_numpy(np.array([r.ids for r in rows], dtype=np.int64)),
                torch.from_numpy(np.array([r.attention_mask for r in rows], dtype=np.int64)))

    def __call__(self, batch: list[tuple[str, ...]], generator: torch.Generator | None = None,
                 margins: list[list[float]] | None = None) -> dict[str, torch.Tensor]:
        """Collate ``batch``; masks draw from ``generator`` (default: the collator's own).
        ``margins``: per item, a teacher's margin of each of its hard negatives; with them the
        batch has ``neg_owner`` (``[N]``: the item each negative belongs to) and ``neg_margin``
        (``[N]``: its margin) for the kept negatives."""
        queries = self.prompts.apply([item[0] for item in batch], "query")
        docs = self.prompts.apply([item[1] for item in batch], "document")
        query_ids, query_mask = self._encode(queries, self.query_max_length)
        doc_ids, doc_mask = self._encode(docs, self.document_max_length)
        candidates = self._candidate[doc_ids] & doc_mask.bool()
        candidates[:, :self._prompt_positions] = False
        masked, labels = mask_tokens(doc_ids, candidates, self.tokenizer.mask_token_id, self._random_ids,
                                     self.mlm_probability, generator or self.generator)
        out = {"query_ids": query_ids, "query_mask": query_mask, "doc_ids": masked, "doc_mask": doc_mask,
               "labels": labels}
        negatives = self.prompts.apply([n for item in batch for n in item[2: 2 + self.negatives]], "document")
        if negatives:
            out["neg_ids"], out["neg_mask"] = self._encode(negatives, self.document_max_length)
            if margins is not None:
                if any(len(m) != len(item) - 2 for item, m in zip(batch, margins, strict=True)):
                    raise ValueError("margins: one per hard negative of each item")
                kept = [m[:self.negatives] for m in margins]
                out["neg_owner"] = torch.tensor([i for i, m in enumerate(kept) for _ in m], dtype=torch.long)
                out["neg_margin"] = torch.tensor([x for m in kept for x in m], dtype=torch.float32)
                if out["neg_margin"].isnan().any():
                    raise ValueError("a hard negative without a teacher margin (NaN): its labels were made for "
                                     "another split or number of hard negatives; label the examples again")
        return out


def _fixed_encoder(tokenizer: PreTrainedTokenizerBase, max_length: int, pad_to_multiple_of: int | None = None):
    """A copy of ``tokenizer``'s Rust backend with truncation to ``max_length`` and padding to the
    batch's longest (up to a multiple of ``pad_to_multiple_of``) built in: the ids of
    ``tokenizer(texts, padding=True, truncation=True, max_length=..., pad_to_multiple_of=...)``
    without the Python wrapper's per-call cost (half the collation time of a 1,024-pair batch
    here; on a GPU the trainer waited on it). The copy's settings never change,
    so it is safe in a prefetch thread. None when the tokenizer has no Rust backend."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    encoder = copy.deepcopy(backend)
    encoder.enable_truncation(max_length, direction=tokenizer.truncation_side)
    encoder.enable_padding(direction=tokenizer.padding_side, pad_id=tokenizer.pad_token_id,
                           pad_type_id=tokenizer.pad_token_type_id, pad_token=tokenizer.pad_token,
                           pad_to_multiple_of=pad_to_multiple_of)
    return encoder
