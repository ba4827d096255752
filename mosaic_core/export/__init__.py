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

from mosaic_core.export.base import (EXPORT_CHECKS, INSTALL_HINT, KINDS, MANIFEST, ExportRefused, ExportResult,
                                     ExportUnavailable, require_extra)
from mosaic_core.export.build import cached_export, export_model
from mosaic_core.export.check import ndcg_at_10
from mosaic_core.export.runtime import ExportedEncoder, exported_encoder, load_exported, torch_threads

__all__ = ["EXPORT_CHECKS", "INSTALL_HINT", "KINDS", "MANIFEST", "ExportRefused", "ExportResult", "ExportUnavailable",
           "ExportedEncoder", "cached_export", "export_model", "exported_encoder", "load_exported", "ndcg_at_10",
           "require_extra", "torch_threads"]
