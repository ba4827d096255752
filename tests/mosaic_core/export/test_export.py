"""Fast exports: each folder loads with its own loader and agrees with the PyTorch model; a
refused export leaves nothing; a static export keeps a domain word one token."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from builders import TINY_WORDS, tiny_bert  # noqa: E402

from mosaic_core import export  # noqa: E402
from mosaic_core.export.check import unit  # noqa: E402

DOMAIN_WORD = "metformin"
TEXTS = ["the patient was given metformin", "cells of a patient", "q", "metformin and the cell were in a patient"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny sentence-transformers model whose tokenizer holds a domain word (as stage 1 inserts it)."""
    from sentence_transformers import SentenceTransformer

    from mosaic_core.modeling.modeldir import write_domain_ids

    root = tmp_path_factory.mktemp("export")
    bert = tiny_bert(root / "bert", words=[*TINY_WORDS, DOMAIN_WORD])
    st = SentenceTransformer(str(bert), device="cpu")
    st.save(str(root / "model"))
    write_domain_ids(root / "model", [st.tokenizer.convert_tokens_to_ids(DOMAIN_WORD)])
    return root / "model"


def _reference(model_dir) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu").encode(TEXTS, normalize_embeddings=True)


@pytest.mark.parametrize("kind", ["onnx", "onnx-int8"])
def test_onnx_export_loads_and_agrees(model_dir, tmp_path, kind):
    result = export.export_model(str(model_dir), kind, tmp_path / kind)
    out = tmp_path / kind
    assert (out / "onnx" / "model.onnx").is_file() and not (out / "model.safetensors").exists()
    assert all(e["type"].startswith("sentence_transformers.models.")
               for e in json.loads((out / "modules.json").read_text()))
    assert json.loads((out / export.MANIFEST).read_text())["metrics"] == result.metrics
    cosines = np.sum(unit(export.load_exported(out).encode(TEXTS)) * _reference(model_dir), axis=1)
    assert cosines.mean() >= export.EXPORT_CHECKS[kind]
    assert result.metrics["cosine_mean"] >= export.EXPORT_CHECKS[kind]
    assert [p.name for p in tmp_path.iterdir()] == [kind]  # no temporary folder left


def test_openvino_export_loads_and_agrees(model_dir, tmp_path):
    pytest.importorskip("openvino")
    export.export_model(str(model_dir), "openvino", tmp_path / "ov")
    assert (tmp_path / "ov" / "openvino" / "openvino_model.xml").is_file()
    cosines = np.sum(unit(export.load_exported(tmp_path / "ov").encode(TEXTS)) * _reference(model_dir), axis=1)
    assert cosines.min() >= 0.999


def test_refused_export_leaves_nothing(model_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(export.EXPORT_CHECKS, "onnx", 1.01)  # no export can reach it
    with pytest.raises(export.ExportRefused, match="mean cosine"):
        export.export_model(str(model_dir), "onnx", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_out_must_be_new_empty_or_an_earlier_export(model_dir, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an earlier export"):
        export.export_model(str(model_dir), "onnx", tmp_path / "out")
    with pytest.raises(ValueError, match="unknown export kind"):
        export.export_model(str(model_dir), "tflite", tmp_path / "other")


def test_static_export_keeps_the_domain_word_one_token(model_dir, tmp_path):
    model2vec = pytest.importorskip("model2vec")
    result = export.export_model(str(model_dir), "static", tmp_path / "static", static_dims=16)
    static = model2vec.StaticModel.from_pretrained(str(tmp_path / "static"))
    assert static.tokenizer.encode(DOMAIN_WORD, add_special_tokens=False).tokens == [DOMAIN_WORD]
    assert result.metrics["domain_words_whole"] == 1 and result.metrics["dims"] == 16
    vectors = unit(static.encode(TEXTS))
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-4)
    # agreement with the source: its spaces differ (PCA), so the pairwise similarities are compared
    assert -1 <= result.metrics["similarity_correlation"] <= 1


def test_ndcg_at_10_matches_a_naive_reference():
    rng = np.random.default_rng(0)
    pairs = [(f"q{i}", f"d{i}") for i in range(30)]
    table = {t: v for t, v in zip([t for p in pairs for t in p], rng.normal(size=(60, 8)), strict=True)}

    def encode(texts):
        return unit(np.stack([table[t] for t in texts]))

    q, d = encode([p[0] for p in pairs]), encode([p[1] for p in pairs])
    naive = []
    for i in range(len(pairs)):
        order = list(np.argsort(-(q[i] @ d.T)))
        rank = order.index(i)
        naive.append(1 / np.log2(rank + 2) if rank < 10 else 0.0)
    assert export.ndcg_at_10(encode, pairs) == pytest.approx(100 * np.mean(naive))
