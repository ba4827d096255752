"""The filter through its ONNX backend: the same kept pairs as PyTorch, the export made once in
the data root's cache and reused, the prompts in front of what the graph encodes, and a clear
error naming the install command when the ``export`` extra is missing."""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from builders import TINY_WORDS, tiny_bert  # noqa: E402

from flows.filter import filter_flow  # noqa: E402
from mosaic_core.config import FilterConfig, PromptsConfig  # noqa: E402
from mosaic_core import export  # noqa: E402
from mosaic_core.export import build as export_build  # noqa: E402
from storage.layout import DataLayout  # noqa: E402
from tasks import filter as filter_tasks  # noqa: E402

pytestmark = pytest.mark.usefixtures("prefect_harness")

PROMPTS = PromptsConfig(query="q ", document="the ")


def pairs_file(path, n=30):
    rng = np.random.default_rng(1)
    words = TINY_WORDS[:-1]
    lines = []
    for i in range(n):
        topic = rng.choice(words, 3, replace=False)
        lines.append(json.dumps({"id": f"p{i}", "query": " ".join(topic),
                                 "document": " ".join(rng.choice(words, 5)) + " " + " ".join(topic)}))
    path.write_text("\n".join(lines) + "\n")
    return path


def kept(root: str) -> dict[str, bool]:
    table = pq.read_table(DataLayout(root).partition_path("filtered", "pairs"), columns=["pair_id", "kept"])
    return dict(zip(table["pair_id"].to_pylist(), table["kept"].to_pylist(), strict=True))


class Recorder:
    """A tokenizer that remembers every text it is given."""

    def __init__(self, inner):
        self.inner, self.texts = inner, []

    def __call__(self, texts, **kw):
        self.texts.extend([texts] if isinstance(texts, str) else texts)
        return self.inner(texts, **kw)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_onnx_backend_keeps_what_torch_keeps_exports_once_and_prompts(tmp_path, monkeypatch):
    src = str(pairs_file(tmp_path / "pairs.jsonl"))
    cfg = FilterConfig(model=str(tiny_bert(tmp_path / "model")), k=2, precision="fp32", prompts=PROMPTS)
    onnx_cfg = cfg.model_copy(update={"backend": "onnx"})
    assert len({cfg.encoding_hash(), onnx_cfg.encoding_hash(),
                cfg.model_copy(update={"backend": "onnx-int8"}).encoding_hash()}) == 3
    exports, recorders = [], []
    real_export, real_encoder = export_build.export_model, export.exported_encoder

    def counting_export(*args, **kw):
        exports.append(args)
        return real_export(*args, **kw)

    def recording_encoder(*args, **kw):
        enc = real_encoder(*args, **kw)
        enc.tokenizer = Recorder(enc.tokenizer)
        recorders.append(enc.tokenizer)
        return enc

    monkeypatch.setattr(export_build, "export_model", counting_export)  # what cached_export calls
    monkeypatch.setattr(export, "exported_encoder", recording_encoder)
    filter_tasks._load_exported.cache_clear()

    filter_flow(src, cfg, str(tmp_path / "torch"))
    root = str(tmp_path / "onnx")
    (m,) = filter_flow(src, onnx_cfg, root)
    torch_kept, onnx_kept = kept(str(tmp_path / "torch")), kept(root)
    assert onnx_kept == torch_kept and 0 < m.kept < len(onnx_kept)

    (folder,) = DataLayout(root).onnx_cache_dir.iterdir()
    assert folder.name.endswith("-onnx") and (folder / "onnx" / "model.onnx").is_file() and len(exports) == 1
    queries = [json.loads(line)["query"] for line in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    seen = recorders[0].texts
    assert {"q " + q for q in queries} <= set(seen) and all(t.startswith(("q ", "the ")) for t in seen)

    filter_tasks._load_exported.cache_clear()  # as a new worker process would start
    (m2,) = filter_flow(src, onnx_cfg.model_copy(update={"query_max_length": 32}), root)  # re-encodes
    assert len(exports) == 1 and len(recorders) == 2 and recorders[1].texts  # encoded, not re-exported
    assert list(DataLayout(root).onnx_cache_dir.iterdir()) == [folder]
    filter_tasks._load_exported.cache_clear()


def test_onnx_backend_without_the_extra_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    with pytest.raises(export.ExportUnavailable, match=r"pip install -e '\.\[export\]'"):
        filter_tasks._encoder(str(tmp_path / "model"), "fp32", None, None, "onnx", str(tmp_path / "root"))
    assert not (tmp_path / "root").exists()
