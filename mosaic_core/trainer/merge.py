"""Weight-space ensembling (WiSE-FT, Wortsman et al. 2022): interpolate the trained weights with
the weights training started from, ``θ(w) = (1 − w)·θ_start + w·θ_end``.

Fine-tuning on in-domain pairs moves a model away from what made it general; part of the way
back often keeps the in-domain gain and recovers general quality. ``θ_start`` is the stage-1
model (new rows at their stage-1 values), ``θ_end`` the last stage's. The mixing weight is
chosen on the validation pairs (never on the test pairs the report and the gate use).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModel

from mosaic_core.modeling.dual_encoder import build_model, save_model
from mosaic_core.modeling.encode import Encoder
from mosaic_core.modeling.prompts import declared_prompts
from mosaic_core.modeling.modeldir import copy_domain_ids
from mosaic_core.modeling.sparse import is_sparse_dir, sparse_encoder
from mosaic_core.trainer.heldout import SELECT_METRIC, RetrievalProbe

log = logging.getLogger(__name__)


def interpolate(start: dict[str, torch.Tensor], end: dict[str, torch.Tensor], weight: float) -> dict[str, torch.Tensor]:
    """``(1 − weight)·start + weight·end`` for every floating-point tensor (others: ``end``'s)."""
    if start.keys() != end.keys():
        raise ValueError(f"the two models differ in their weights: {sorted(start.keys() ^ end.keys())[:5]}")
    out = {}
    for name, b in end.items():
        a = start[name]
        if a.shape != b.shape:
            raise ValueError(f"{name}: shape {tuple(a.shape)} at the start, {tuple(b.shape)} at the end")
        out[name] = torch.lerp(a.float(), b.float(), weight).to(b.dtype) if b.is_floating_point() else b
    return out


def merge_models(start_dir: str, end_dir: str, weight: float, out_dir: Path) -> Path:
    """Write the interpolated model (``end_dir``'s files and MLM head, interpolated encoder)."""
    model, _ = build_model(end_dir, kind="sparse" if is_sparse_dir(end_dir) else "dense")
    end = model.encoder.state_dict()
    start = AutoModel.from_pretrained(start_dir, dtype=torch.float32).state_dict()
    # A sparse model's encoder comes out of its masked-LM checkpoint, which has no pooler; AutoModel adds one.
    start = {k: v for k, v in start.items() if k in end or not k.startswith("pooler.")}
    model.encoder.load_state_dict(interpolate(start, end, weight))
    save_model(model, end_dir, Path(out_dir))
    copy_domain_ids(end_dir, Path(out_dir))
    return Path(out_dir)


def validation_score(model_dir: str, probe: RetrievalProbe, query_length: int, document_length: int) -> dict:
    lengths = {"query": query_length, "document": document_length}
    if is_sparse_dir(model_dir):
        st = sparse_encoder(model_dir)
        prompts = declared_prompts(model_dir)

        def embed(texts: list[str], kind: str) -> torch.Tensor:  # SPLADE weights: relevance is their dot product
            st.max_seq_length = lengths[kind]
            return st.encode(prompts.apply(texts, kind), convert_to_tensor=True,
                             convert_to_sparse_tensor=False).float().cpu()
        return probe.score(embed)
    encoder = Encoder.load(model_dir, normalize=True, precision="fp32")

    def embed(texts: list[str], kind: str) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(encoder.with_max_length(lengths[kind]).encode(texts, kind=kind)))
    return probe.score(embed)


def choose_weight(start_dir: str, end_dir: str, probe: RetrievalProbe, weights: Sequence[float], work_dir: Path,
                  query_length: int = 64, document_length: int = 256) -> tuple[float, list[dict]]:
    """(the weight with the best validation NDCG@10 — ties: the larger —, every weight's scores).
    Each candidate is written to ``work_dir/w<weight>`` and scored; ``1.0`` is the end model."""
    scores = []
    for w in sorted(set(weights)):
        path = end_dir if w == 1.0 else str(merge_models(start_dir, end_dir, w, Path(work_dir) / f"w{w:g}"))
        scores.append({"weight": w, **validation_score(path, probe, query_length, document_length)})
        log.info("merge weight %.2f: validation NDCG@10 %.4f", w, scores[-1][SELECT_METRIC])
    best = max(scores, key=lambda s: (s[SELECT_METRIC], s["weight"]))
    return best["weight"], scores
