"""What every export shares: its kinds, its manifest, its checks' thresholds, its errors and result."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

KINDS = ("onnx", "onnx-int8", "openvino", "static")
MANIFEST = "mosaic_export.json"
"""Written in every export folder: kind, source, the verification's numbers, what the loader needs."""
EXPORT_CHECKS = {"onnx": 0.99, "onnx-int8": 0.98, "openvino": 0.99}
"""Least mean cosine to the PyTorch embeddings each transformer export must reach."""
INT8_NDCG_POINTS = 0.5
"""Most NDCG@10 points (of 100) an int8 export may lose to PyTorch on held-out pairs."""
INSTALL_HINT = "pip install -e '.[export]'"
WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")

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
