"""The embedding cache: per partition and encoder, float16, so a new k or threshold re-filters
without re-encoding."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from storage.layout import DataLayout
from storage.parquet import write_atomic_bytes


def embeddings_path(layout: DataLayout, encoding_hash: str, partition: str) -> Path:
    return layout.root / "embeddings" / encoding_hash / f"{partition}.npz"


def save_embeddings(path: Path, queries: np.ndarray, documents: np.ndarray) -> None:
    """Store both matrices as float16 (atomically)."""
    buf = io.BytesIO()
    np.savez(buf, queries=queries.astype(np.float16), documents=documents.astype(np.float16))
    write_atomic_bytes(path, buf.getvalue())


def load_embeddings(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The stored matrices as float32: exactly the values every filter decision was made on."""
    with np.load(path) as z:
        return z["queries"].astype(np.float32), z["documents"].astype(np.float32)
