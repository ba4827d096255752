"""Fast exports of a dense model: ONNX (fp32 or int8), OpenVINO, and a static model2vec model.

Every export is written into a temporary folder beside ``out_dir``, verified there against the
PyTorch model, and only then renamed into place; a refused export leaves nothing behind.

* ``onnx``: the sentence-transformers folder (configs, tokenizer, pooling, normalise) without
  its PyTorch weights, plus ``onnx/model.onnx``; loads with ``SentenceTransformer(DIR,
  backend="onnx")`` where optimum-onnx is installed (see below), and here with :func:`load_exported`;
* ``onnx-int8``: the same, ``onnx/model.onnx`` quantised to int8 (dynamic, per channel, the
  MatMul weights; the word embeddings stay fp32);
* ``openvino``: the same with ``openvino/openvino_model.xml`` + ``.bin`` instead
  (``backend="openvino"`` needs optimum-intel; :func:`load_exported` does not);
* ``static``: a model2vec model distilled with the model's own (expanded) tokenizer;
  ``StaticModel.from_pretrained(DIR)``.

Why not sentence-transformers' own export functions: they go through optimum, and every
optimum-onnx release (0.1.0 at the time of writing) requires transformers < 4.58 while this
project runs transformers 5 (optimum-intel 2.2: transformers < 5.6, huggingface-hub < 1.22). So
the transformer is exported here with ``torch.onnx.export`` (the dynamo exporter: the legacy
TorchScript one traces transformers 5's attention-mask code wrongly, off by up to 5 on
MiniLM), into the layout optimum's ``ORTModelForFeatureExtraction`` reads (inputs as the
tokenizer names them, output ``last_hidden_state``); int8 is onnxruntime's ``quantize_dynamic``
with the settings of optimum's ``avx512_vnni`` config; OpenVINO converts the ONNX graph.

The static export keeps the expanded tokenizer: model2vec's ``distill_from_model`` embeds every
entry of the tokenizer's model vocabulary (where stage 1 inserts domain tokens, for WordPiece,
BPE and Unigram alike), so a domain word stays one token. model2vec drops *added* tokens
(``tokenizer.add_tokens``), and for BPE/Unigram tokenizers it turns on the pre-tokenizer's
prefix space (a word at the start of a text then gets its word-initial token, as inside a
text); both are checked: every domain token the source keeps whole as a word must stay one
token in the static model, else the export is refused.

The consistency filter encodes through an ``onnx``/``onnx-int8`` export with ``filter.backend``:
:func:`cached_export` makes it once per model (under the data root's ``cache/onnx``) and
:func:`exported_encoder` runs its graph inside :class:`~mosaic_core.modeling.encode.Encoder`, so
prompts, truncation, batching, pooling and normalisation are the PyTorch path's own.

Verification (``EXPORT_CHECKS``): mean cosine to the PyTorch embeddings ≥ 0.99 (int8: ≥ 0.98,
and NDCG@10 within 0.5 points of PyTorch's when held-out pairs are given). A static model is a
different model (one vector per token): it must reload identically, keep the domain tokens
whole; the correlation of its pairwise similarities with the transformer's, NDCG@10 and speed are
recorded, not gated (PCA rotates its space: row-wise cosines to the transformer mean nothing).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from mosaic_core.modeling.prompts import Kind, declared_prompts

log = logging.getLogger(__name__)

KINDS = ("onnx", "onnx-int8", "openvino", "static")
MANIFEST = "mosaic_export.json"
"""Written in every export folder: kind, source, the verification's numbers, what the loader needs."""
EXPORT_CHECKS = {"onnx": 0.99, "onnx-int8": 0.98, "openvino": 0.99}
"""Least mean cosine to the PyTorch embeddings each transformer export must reach."""
INT8_NDCG_POINTS = 0.5
"""Most NDCG@10 points (of 100) an int8 export may lose to PyTorch on held-out pairs."""
INSTALL_HINT = "pip install -e '.[export]'"
WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")

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


class ExportUnavailable(ImportError):
    """The ``export`` extra is not installed; the message says how to install it."""


class ExportRefused(ValueError):
    """An export failed its verification (numbers in the message); nothing was written."""


@dataclass(frozen=True)
class ExportResult:
    """What one export wrote and how it was verified (``metrics``: cosine, NDCG@10, speed)."""

    kind: str
    out_dir: str
    source: str
    size_bytes: int
    seconds: float
    metrics: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _require(*modules: str) -> None:
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ExportUnavailable(f"exporting needs {name}, which is not installed: {INSTALL_HINT}") from exc


def require_extra(kind: str) -> None:
    """Raise :class:`ExportUnavailable` (naming :data:`INSTALL_HINT`) unless ``kind`` can be exported and run."""
    _require(*(("model2vec", "skeletoken") if kind == "static" else ("onnx", "onnxruntime", "onnxscript")),
             *(("openvino",) if kind == "openvino" else ()))


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
    cosines = np.sum(_unit(reference) * _unit(exported.encode(sample)), axis=1)
    metrics = {"texts": len(sample), "cosine_mean": round(float(cosines.mean()), 5),
               "cosine_min": round(float(cosines.min()), 5),
               **_speed(lambda t: st.encode(t, batch_size=32), exported.encode, sample)}
    problems = []
    if metrics["cosine_mean"] < EXPORT_CHECKS[kind]:
        problems.append(f"mean cosine to the PyTorch embeddings {metrics['cosine_mean']:.4f} < "
                        f"{EXPORT_CHECKS[kind]} (min {metrics['cosine_min']:.4f}, {len(sample)} texts)")
    if pairs:
        torch_ndcg = ndcg_at_10(lambda t: st.encode(t, normalize_embeddings=True, convert_to_numpy=True), pairs)
        ndcg = ndcg_at_10(lambda t: _unit(exported.encode(t)), pairs)
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


class ExportedEncoder:
    """An ONNX or OpenVINO export run as sentence-transformers runs it: the tokenizer, the graph,
    then the folder's own modules after the transformer (pooling, dense, normalise)."""

    def __init__(self, folder: str | Path):
        from sentence_transformers.util import import_from_string
        from transformers import AutoTokenizer

        self.folder = Path(folder)
        manifest = json.loads((self.folder / MANIFEST).read_text())
        manifest = manifest.get("loader", manifest)
        self.inputs, self.max_length = manifest["inputs"], manifest["max_seq_length"]
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.folder))
        self.prompts = declared_prompts(self.folder)
        entries = json.loads((self.folder / "modules.json").read_text())
        self.modules = [import_from_string(e["type"]).load(str(self.folder), subfolder=e["path"],
                                                           local_files_only=True) for e in entries[1:]]
        if (self.folder / "openvino").is_dir():
            import openvino as ov

            compiled = ov.Core().compile_model(str(self.folder / "openvino" / "openvino_model.xml"), "CPU")
            self._run = lambda feeds: compiled(feeds)[0]
        else:
            import onnxruntime as ort

            session = ort.InferenceSession(str(self.folder / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
            self._run = lambda feeds: session.run(None, feeds)[0]

    def encode(self, texts: Sequence[str], batch_size: int = 32, kind: Kind | None = None) -> np.ndarray:
        """``texts`` → (len(texts), dim) float32 embeddings, as the source model's ``encode`` gives them;
        ``kind`` ``query`` or ``document`` puts the prompt the folder declares in front."""
        import torch

        texts = self.prompts.apply(list(texts), kind)
        out = []
        for start in range(0, len(texts), batch_size):
            batch = texts[start:start + batch_size]
            enc = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="np")
            hidden = self._run({n: enc[n].astype(np.int64) for n in self.inputs})
            features = {"token_embeddings": torch.from_numpy(np.asarray(hidden, dtype=np.float32)),
                        "attention_mask": torch.from_numpy(enc["attention_mask"])}
            with torch.no_grad():
                for module in self.modules:
                    features = module(features)
            out.append(features["sentence_embedding"].numpy())
        return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


def load_exported(folder: str | Path) -> ExportedEncoder:
    """An ``onnx``/``onnx-int8``/``openvino`` export folder, ready to ``encode``, without optimum."""
    return ExportedEncoder(folder)


class OnnxGraph:
    """An ``onnx``/``onnx-int8`` export's graph in the place of a transformers model: called with
    the tokenizer's tensors, it returns ``last_hidden_state`` ``[B, T, d]`` (fp32, CPU), so
    :class:`~mosaic_core.modeling.encode.Encoder` runs it with its own prompts, truncation,
    length-sorted batching, pooling and normalisation."""

    def __init__(self, folder: str | Path):
        import onnxruntime as ort
        from transformers import AutoConfig

        folder = Path(folder)
        manifest = json.loads((folder / MANIFEST).read_text())
        self.inputs = manifest.get("loader", manifest)["inputs"]
        self.config = AutoConfig.from_pretrained(str(folder))
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch_threads()
        # Waiting threads sleep instead of spinning: on shared CPU cores spinning costs more than it saves.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(folder / "onnx" / "model.onnx"), options,
                                            providers=["CPUExecutionProvider"])

    def __call__(self, **batch):
        import torch

        feeds = {n: batch[n].cpu().numpy().astype(np.int64) for n in self.inputs}
        return SimpleNamespace(last_hidden_state=torch.from_numpy(self.session.run(None, feeds)[0]))


def torch_threads() -> int:
    """The CPU threads PyTorch computes with (``torch.set_num_threads``), for the ONNX session too."""
    import torch

    return torch.get_num_threads()


def exported_encoder(folder: str | Path, *, normalize: bool | None = None, max_length: int = 256,
                     batch_tokens: int | None = None, prompts: object | None = None):
    """An :class:`~mosaic_core.modeling.encode.Encoder` (CPU, fp32 around the graph) running an
    ``onnx``/``onnx-int8`` export folder; the arguments are :meth:`Encoder.load`'s, the prompts
    the folder declares (its source's) unless ``prompts`` (a ``Prompts``, or an override as
    :meth:`Encoder.load` takes it) says otherwise."""
    import torch
    from transformers import AutoTokenizer

    from mosaic_core.modeling.encode import Encoder, max_positions, read_st_pooling
    from mosaic_core.modeling.prompts import Prompts, resolve_prompts

    require_extra("onnx")
    graph = OnnxGraph(folder)
    pooling, st_normalize = read_st_pooling(str(folder))
    return Encoder(graph, AutoTokenizer.from_pretrained(str(folder)), pooling or "mean",
                   normalize if normalize is not None else bool(st_normalize), torch.device("cpu"), None,
                   min(max_length, max_positions(graph.config)), batch_tokens,
                   prompts if isinstance(prompts, Prompts) else resolve_prompts(str(folder), prompts))


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
    same = np.sum(_unit(vectors) * _unit(static.encode(sample)), axis=1).min()
    split = [w for w in _domain_words(source, st.tokenizer)
             if len(reloaded.tokenizer.encode(w, add_special_tokens=False).ids) != 1]
    problems = ([f"the reloaded model differs from the distilled one (min cosine {same:.4f})"] if same < 0.9999 else
                []) + ([f"{len(split)} domain words are no longer one token ({', '.join(split[:5])})"] if split else [])
    if problems:
        raise ExportRefused(f"static export refused, nothing written: {'; '.join(problems)}")
    metrics = {"texts": len(sample), "dims": int(vectors.shape[1]), "vocabulary": int(reloaded.embedding.shape[0]),
               "similarity_correlation": round(_similarity_correlation(
                   vectors, st.encode(sample, normalize_embeddings=True, convert_to_numpy=True)), 4),
               "domain_words_whole": len(_domain_words(source, st.tokenizer)),
               **_speed(lambda t: st.encode(t, batch_size=32), reloaded.encode, sample)}
    if pairs:
        metrics.update(pairs=len(pairs), ndcg10=round(ndcg_at_10(lambda t: _unit(reloaded.encode(t)), pairs), 2),
                       ndcg10_torch=round(ndcg_at_10(
                           lambda t: st.encode(t, normalize_embeddings=True, convert_to_numpy=True), pairs), 2))
    return metrics


# --- measures -------------------------------------------------------------------------------------


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _similarity_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of the pairwise cosines of the same texts under two models (their spaces differ:
    a static model's PCA rotates it, so row-wise cosines would mean nothing)."""
    upper = np.triu_indices(len(a), k=1)
    return float(np.corrcoef((_unit(a) @ _unit(a).T)[upper], (_unit(b) @ _unit(b).T)[upper])[0, 1])


def _speed(reference, candidate, texts: list[str], repeats: int = 3) -> dict:
    """Texts per second of ``reference`` (PyTorch ``encode``) and ``candidate`` on ``texts``, best of ``repeats``."""
    texts = texts * max(1, 64 // len(texts))

    def rate(fn) -> float:
        fn(texts[:4])  # warm-up
        best = min(_timed(fn, texts) for _ in range(repeats))
        return len(texts) / best

    torch_rate, rate_here = rate(reference), rate(candidate)
    return {"texts_per_s_torch": round(torch_rate, 1), "texts_per_s": round(rate_here, 1),
            "speedup": round(rate_here / torch_rate, 2)}


def _timed(fn, texts) -> float:
    start = time.perf_counter()
    fn(texts)
    return time.perf_counter() - start


def ndcg_at_10(encode, pairs: Sequence[tuple[str, str]]) -> float:
    """NDCG@10 (in points, 0–100) of finding each pair's document from its query among all the
    pairs' documents (one relevant document per query); ``encode`` gives unit rows."""
    queries, documents = [q for q, _ in pairs], list(dict.fromkeys(d for _, d in pairs))
    index = {d: i for i, d in enumerate(documents)}
    scores = np.asarray(encode(queries)) @ np.asarray(encode(documents)).T
    relevant = np.array([index[d] for _, d in pairs])
    ranks = (scores > scores[np.arange(len(queries)), relevant][:, None]).sum(axis=1)  # 0-based
    gains = np.where(ranks < 10, 1.0 / np.log2(ranks + 2), 0.0)
    return float(100 * gains.mean())
