"""Making an export: written into a temporary folder, verified against the PyTorch model there,
then renamed into place (the package's doc says what each kind is and how it is checked)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mosaic_core.export.base import (EXPORT_CHECKS, INT8_NDCG_POINTS, KINDS, MANIFEST, WEIGHTS, ExportRefused,
                                     ExportResult, require_extra)
from mosaic_core.export.check import ndcg_at_10, similarity_correlation, speed, unit
from mosaic_core.export.runtime import load_exported

log = logging.getLogger(__name__)

SAMPLE_TEXTS = (
    "Metformin lowers fasting glucose in adults with type 2 diabetes.",
    "Randomised trial of aspirin for the primary prevention of cardiovascular events",
    "The patient presented with fever, cough and shortness of breath.",
    "CRISPR-Cas9 editing of haematopoietic stem cells restores fetal haemoglobin.",
    "What is the first-line treatment for community-acquired pneumonia?",
    "Statins reduce LDL cholesterol by inhibiting HMG-CoA reductase.",
    "A cohort study of sleep duration and cognitive decline in older adults",
    "The weather in Paris is mild in spring.",
    "How do I reset my password?",
    "Insulin resistance precedes the onset of overt hyperglycaemia by several years.",
    "Machine learning models for predicting sepsis in intensive care units",
    "Warfarin interacts with many antibiotics and increases bleeding risk.",
    "q",
    "The cells were cultured in DMEM with 10% fetal bovine serum for 48 h.",
    "Effects of long-term exposure to fine particulate matter on asthma incidence in children",
    "Heparin-induced thrombocytopenia: diagnosis and management",
)
"""Texts every verification encodes (besides the caller's texts and the model's domain tokens)."""


def export_model(model: str, kind: str, out_dir: str | Path, *, texts: Sequence[str] = (),
                 pairs: Sequence[tuple[str, str]] = (), static_dims: int = 256) -> ExportResult:
    """Export ``model`` (a dense sentence-transformers folder or reference) as ``kind`` into
    ``out_dir``, verified before it is kept (see the module's doc). ``texts``: extra texts to
    compare embeddings on; ``pairs``: held-out (query, document) pairs for NDCG@10. An existing
    ``out_dir`` is replaced only if it is empty or an earlier export (holds :data:`MANIFEST`).
    Raises :class:`ExportRefused` (with the numbers), :class:`ExportUnavailable`, ValueError."""
    from sentence_transformers import SentenceTransformer

    from mosaic_core.modeling.refs import check_model

    if kind not in KINDS:
        raise ValueError(f"unknown export kind {kind!r}: choose among {', '.join(KINDS)}")
    require_extra(kind)
    out = Path(out_dir).expanduser().resolve()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).is_file())):
        raise ValueError(f"{out} exists and is not an earlier export: pass a new or empty folder as --out")
    source = check_model(model)
    started = time.perf_counter()
    st = SentenceTransformer(source, device="cpu")
    _check_dense(st, model)
    sample = list(dict.fromkeys([*SAMPLE_TEXTS, *texts, *_domain_words(source, st.tokenizer)]))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex}.tmp")
    try:
        if kind == "static":
            metrics = _export_static(st, source, tmp, sample, pairs, static_dims)
        else:
            metrics = _export_graph(st, kind, tmp, sample, pairs)
        size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
        result = ExportResult(kind, str(out), source, size, round(time.perf_counter() - started, 1), metrics)
        loader = json.loads((tmp / MANIFEST).read_text()) if (tmp / MANIFEST).is_file() else {}
        (tmp / MANIFEST).write_text(json.dumps({**result.to_dict(), "loader": loader}, indent=2))
        old = out.with_name(f".{out.name}.{uuid.uuid4().hex}.old")
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("exported %s as %s to %s (%s)", source, kind, out, metrics)
    return result


def _check_dense(st, model: str) -> None:
    from sentence_transformers.models import Transformer

    first = st[0]
    if not isinstance(first, Transformer) or not hasattr(first, "auto_model"):
        raise ValueError(f"{model}: only dense models whose first module is a Transformer can be exported "
                         f"(this one starts with {type(first).__name__}; sparse models are not supported)")


def _domain_words(source: str, tokenizer) -> list[str]:
    """The domain tokens of a MOSAIC model (``domain_token_ids.json``) that are whole words, as text."""
    from mosaic_core.modeling.modeldir import read_domain_ids

    ids = read_domain_ids(source)
    if ids is None:
        return []
    words = []
    for token_id in ids.tolist():
        word = tokenizer.decode([token_id]).strip()
        if word and tokenizer(word, add_special_tokens=False)["input_ids"] == [token_id]:
            words.append(word)
    return words


# --- ONNX, int8, OpenVINO -------------------------------------------------------------------------


def _export_graph(st, kind: str, tmp: Path, sample: list[str], pairs: Sequence[tuple[str, str]]) -> dict:
    """Save ``st`` without its PyTorch weights, add the graph, verify it, return the numbers."""
    st.save(str(tmp))
    for name in WEIGHTS:
        (tmp / name).unlink(missing_ok=True)
    for shard in tmp.glob("model-*-of-*.safetensors"):
        shard.unlink()
    _portable_module_types(tmp / "modules.json")
    onnx_file = tmp / "onnx" / "model.onnx"
    _torch_to_onnx(st, onnx_file)
    if kind == "onnx-int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        fp32 = onnx_file.with_name("model_fp32.onnx")
        os.replace(onnx_file, fp32)
        quantize_dynamic(str(fp32), str(onnx_file), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"])
        fp32.unlink()
    elif kind == "openvino":
        import openvino as ov

        ov.save_model(ov.convert_model(str(onnx_file)), str(tmp / "openvino" / "openvino_model.xml"))
        shutil.rmtree(tmp / "onnx")
    inputs = [n for n in st.tokenizer.model_input_names if n in st.tokenizer("x")]
    (tmp / MANIFEST).write_text(json.dumps({"kind": kind, "inputs": inputs,
                                            "max_seq_length": st.max_seq_length}))
    exported = load_exported(tmp)
    reference = st.encode(sample, normalize_embeddings=True, convert_to_numpy=True)
    cosines = np.sum(unit(reference) * unit(exported.encode(sample)), axis=1)
    metrics = {"texts": len(sample), "cosine_mean": round(float(cosines.mean()), 5),
               "cosine_min": round(float(cosines.min()), 5),
               **speed(lambda t: st.encode(t, batch_size=32), exported.encode, sample)}
    problems = []
    if metrics["cosine_mean"] < EXPORT_CHECKS[kind]:
        problems.append(f"mean cosine to the PyTorch embeddings {metrics['cosine_mean']:.4f} < "
                        f"{EXPORT_CHECKS[kind]} (min {metrics['cosine_min']:.4f}, {len(sample)} texts)")
    if pairs:
        torch_ndcg = ndcg_at_10(lambda t: st.encode(t, normalize_embeddings=True, convert_to_numpy=True), pairs)
        ndcg = ndcg_at_10(lambda t: unit(exported.encode(t)), pairs)
        metrics.update(pairs=len(pairs), ndcg10_torch=round(torch_ndcg, 2), ndcg10=round(ndcg, 2))
        if kind == "onnx-int8" and torch_ndcg - ndcg > INT8_NDCG_POINTS:
            problems.append(f"NDCG@10 {ndcg:.2f} is {torch_ndcg - ndcg:.2f} points below PyTorch's "
                            f"{torch_ndcg:.2f} on {len(pairs)} held-out pairs (at most {INT8_NDCG_POINTS})")
    if problems:
        raise ExportRefused(f"{kind} export refused, nothing written: {'; '.join(problems)}")
    return metrics


def _portable_module_types(modules_json: Path) -> None:
    """Name the modules by their ``sentence_transformers.models`` alias, which sentence-transformers 5
    reads too: the serving side (optimum-onnx needs transformers 4) often runs an older one."""
    import sentence_transformers.models as aliases

    entries = json.loads(modules_json.read_text())
    for entry in entries:
        name = entry["type"].rsplit(".", 1)[-1]
        if getattr(aliases, name, None) is not None:
            entry["type"] = f"sentence_transformers.models.{name}"
    modules_json.write_text(json.dumps(entries, indent=2))


def _torch_to_onnx(st, path: Path) -> None:
    """The transformer of ``st`` as an ONNX graph: token ids (and masks) in, ``last_hidden_state`` out,
    batch and sequence dynamic, one file (no external data; models < 2 GB)."""
    import torch

    model = st[0].auto_model.eval()
    example = st.tokenizer(["a short text", "a longer text, to pad the other one"], padding=True, return_tensors="pt")
    names = [n for n in st.tokenizer.model_input_names if n in example]

    class Graph(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *tensors):
            return self.inner(**dict(zip(names, tensors, strict=True))).last_hidden_state

    batch, seq = torch.export.Dim("batch_size"), torch.export.Dim("sequence_length")
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        program = torch.onnx.export(Graph(model), tuple(example[n] for n in names), dynamo=True,
                                    input_names=names, output_names=["last_hidden_state"],
                                    dynamic_shapes=(tuple({0: batch, 1: seq} for _ in names),), verbose=False)
    program.save(str(path), external_data=False)


def cached_export(model: str, kind: str, cache_dir: str | Path) -> Path:
    """The ``kind`` export of ``model`` in ``cache_dir/<fingerprint>-<kind>``: made (and verified,
    :func:`export_model`) on the first call, reused by every later one. Call under one writer:
    leftovers of a killed export (``.*.tmp``) are removed before a new one is made."""
    import hashlib

    from mosaic_core.modeling.fingerprint import model_fingerprint
    from mosaic_core.modeling.refs import check_model

    require_extra(kind)
    fingerprint = hashlib.sha256(model_fingerprint(check_model(model)).encode()).hexdigest()[:16]
    out = Path(cache_dir).expanduser().resolve() / f"{fingerprint}-{kind}"
    manifest = out / MANIFEST
    if manifest.is_file() and json.loads(manifest.read_text()).get("kind") == kind:
        return out
    for stale in out.parent.glob(f".{out.name}.*.tmp") if out.parent.is_dir() else ():
        shutil.rmtree(stale, ignore_errors=True)
    log.info("exporting %s as %s into %s (once; later runs reuse it)", model, kind, out)
    export_model(model, kind, out)
    return out


# --- static (model2vec) ---------------------------------------------------------------------------


def _export_static(st, source: str, tmp: Path, sample: list[str], pairs: Sequence[tuple[str, str]],
                   dims: int) -> dict:
    from model2vec import StaticModel
    from model2vec.distill import distill_from_model

    transformer = st[0].auto_model
    hidden = transformer.config.hidden_size
    static = distill_from_model(transformer, st.tokenizer, device="cpu", pca_dims=min(dims, hidden))
    static.save_pretrained(str(tmp))
    reloaded = StaticModel.from_pretrained(str(tmp))
    vectors = reloaded.encode(sample)
    same = np.sum(unit(vectors) * unit(static.encode(sample)), axis=1).min()
    split = [w for w in _domain_words(source, st.tokenizer)
             if len(reloaded.tokenizer.encode(w, add_special_tokens=False).ids) != 1]
    problems = ([f"the reloaded model differs from the distilled one (min cosine {same:.4f})"] if same < 0.9999 else
                []) + ([f"{len(split)} domain words are no longer one token ({', '.join(split[:5])})"] if split else [])
    if problems:
        raise ExportRefused(f"static export refused, nothing written: {'; '.join(problems)}")
    metrics = {"texts": len(sample), "dims": int(vectors.shape[1]), "vocabulary": int(reloaded.embedding.shape[0]),
               "similarity_correlation": round(similarity_correlation(
                   vectors, st.encode(sample, normalize_embeddings=True, convert_to_numpy=True)), 4),
               "domain_words_whole": len(_domain_words(source, st.tokenizer)),
               **speed(lambda t: st.encode(t, batch_size=32), reloaded.encode, sample)}
    if pairs:
        metrics.update(pairs=len(pairs), ndcg10=round(ndcg_at_10(lambda t: unit(reloaded.encode(t)), pairs), 2),
                       ndcg10_torch=round(ndcg_at_10(
                           lambda t: st.encode(t, normalize_embeddings=True, convert_to_numpy=True), pairs), 2))
    return metrics


# --- measures -------------------------------------------------------------------------------------
