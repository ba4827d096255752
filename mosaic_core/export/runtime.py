"""Running an export without optimum: :class:`ExportedEncoder` (an ONNX or OpenVINO folder, as
sentence-transformers runs it) and :func:`exported_encoder` (an ONNX graph inside the project's
own :class:`~mosaic_core.modeling.encode.Encoder`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from mosaic_core.export.base import MANIFEST, require_extra
from mosaic_core.modeling.prompts import Kind, declared_prompts


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
