"""The sparse (SPLADE) model kind (seed 003): the representation *is* the MLM head's output.

A text's representation has one weight per vocabulary entry: ``log(1 + ReLU(logits))`` of the
MLM head at every position, max-pooled over the positions (SPLADE v2). Relevance is the dot
product of two representations. Retrieval training adds the FLOPS regulariser
``sum_j (mean_i w_ij)^2`` on the queries and on the documents of a batch, which pushes the
average weight of every vocabulary entry down and so keeps the representations sparse.

Stage 1's new rows are new output dimensions here: "does the model know the new word" is
literally whether the word's weight fires (:func:`term_activation`).

On disk a sparse model is what sentence-transformers' ``SparseEncoder`` loads: a fill-mask
``Transformer`` (the ``*ForMaskedLM`` checkpoint, head included) and ``SpladePooling``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Literal

import torch

from mosaic_core.modeling.heads import checkpoint_transform

ModelKind = Literal["dense", "sparse"]


def splade(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, T, V]`` MLM logits + ``[B, T]`` attention mask → ``[B, V]`` fp32 representations:
    ``max_t log(1 + ReLU(logits))`` over the unmasked positions."""
    weights = torch.log1p(torch.relu(logits.float())) * mask.unsqueeze(-1).to(torch.float32)
    return weights.max(dim=1).values


def flops(reps: torch.Tensor) -> torch.Tensor:
    """The FLOPS regulariser of ``[B, V]`` representations: ``sum_j (mean_i |w_ij|)^2``."""
    return (reps.float().abs().mean(dim=0) ** 2).sum()


def is_sparse_dir(model_dir: str | Path) -> bool:
    """Whether ``model_dir`` is a sentence-transformers ``SparseEncoder`` directory."""
    modules = Path(model_dir) / "modules.json"
    if not modules.is_file():
        return False
    return any(is_sparse_module(e) for e in json.loads(modules.read_text()))


def is_sparse_module(entry: dict) -> bool:
    """Whether a ``modules.json`` entry is one of sentence-transformers' sparse-encoder modules."""
    return "sparse_encoder" in entry.get("type", "")


def sparse_encoder(resolved: str, device: str | None = "cpu"):
    """A ``SparseEncoder`` of ``resolved``: the directory's own when it is one (a MOSAIC sparse
    stage output, or a hub SPLADE such as ``naver/splade-cocondenser-ensembledistil``), else
    SPLADE built on the checkpoint's masked-LM head (fill-mask transformer + max SpladePooling)."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    if is_sparse_model(resolved):
        return SparseEncoder(resolved, device=device)
    transformer = Transformer(resolved, transformer_task="fill-mask")
    pooling = SpladePooling("max", "relu", embedding_dimension=transformer.auto_model.config.vocab_size)
    return SparseEncoder(modules=[transformer, pooling], device=device)


def is_sparse_model(resolved: str) -> bool:
    """Whether ``resolved`` (a local directory or a hub id) is a ``SparseEncoder``."""
    if Path(resolved).exists():
        return is_sparse_dir(resolved)
    from huggingface_hub import hf_hub_download

    try:
        return is_sparse_dir(Path(hf_hub_download(resolved, "modules.json")).parent)
    except Exception:  # noqa: BLE001 - no modules.json (a plain checkpoint) or no network: not a SparseEncoder
        return False


def save_sparse(encoder: torch.nn.Module, head, template: str, out_dir: Path) -> None:
    """Write ``encoder`` + MOSAIC's MLM ``head`` (:class:`mosaic_core.modeling.dual_encoder.MLMHead`) as a
    ``SparseEncoder`` directory, taking the tokenizer and module settings from ``template``
    (the stage's input model, same vocabulary)."""
    st = sparse_encoder(template)
    mlm = st[0].auto_model
    with torch.no_grad():
        mlm.base_model.load_state_dict({k: v.detach().cpu() for k, v in encoder.state_dict().items()})
        dense, norm = checkpoint_transform(mlm)
        dense.load_state_dict({k: v.detach().cpu() for k, v in head.dense.state_dict().items()})
        norm.load_state_dict({k: v.detach().cpu() for k, v in head.norm.state_dict().items()})
        decoder = mlm.get_output_embeddings()
        decoder.weight.copy_(mlm.get_input_embeddings().weight)  # tied: the same rows as the encoder's input
        decoder.bias.copy_(head.bias.detach().cpu())
    _replace_modules(out_dir, st)


def convert_to_sparse(model_dir: Path) -> None:
    """Rewrite a stage-1 output (sentence-transformers dense files; the masked-LM checkpoint at
    its root when the base shipped a head) as a ``SparseEncoder`` directory, in place."""
    _replace_modules(Path(model_dir), sparse_encoder(str(model_dir)))


def _replace_modules(out_dir: Path, st) -> None:
    """Save ``st`` into ``out_dir``, removing the module folders of the model that was there."""
    out_dir = Path(out_dir)
    old = out_dir / "modules.json"
    stale = [e["path"] for e in json.loads(old.read_text()) if e.get("path")] if old.is_file() else []
    out_dir.mkdir(parents=True, exist_ok=True)
    st.save(str(out_dir))
    kept = {e["path"] for e in json.loads(old.read_text()) if e.get("path")}
    for path in set(stale) - kept:
        shutil.rmtree(out_dir / path, ignore_errors=True)


@torch.no_grad()
def term_activation(st, term: str, texts: list[str]) -> dict:
    """Seed 003's diagnostic: the weight the term's own vocabulary entries get in the
    representations of ``texts`` (mean over texts of the mean over the term's pieces), and the
    share of texts in which every piece fires (weight > 0)."""
    tokenizer = st.tokenizer
    ids = tokenizer(term, add_special_tokens=False)["input_ids"]
    if not texts or not ids:
        return {"texts": len(texts), "pieces": tokenizer.convert_ids_to_tokens(ids), "mean_weight": None,
                "fires": None}
    reps = st.encode(texts, convert_to_tensor=True, convert_to_sparse_tensor=False).float().cpu()
    weights = reps[:, ids]
    return {"texts": len(texts), "pieces": tokenizer.convert_ids_to_tokens(ids),
            "mean_weight": float(weights.mean()), "fires": float((weights > 0).all(dim=1).float().mean())}
