"""The embedding cache: per partition and encoder, float16, so a new k or threshold re-filters
without re-encoding; each row with its pair's content hash, so a partition that changed (a
citation revised or deleted by an update) re-encodes only the pairs it had not encoded before."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from storage.layout import DataLayout
from storage.parquet import write_atomic_bytes


def embeddings_path(layout: DataLayout, encoding_hash: str, partition: str) -> Path:
    return layout.root / "embeddings" / encoding_hash / f"{partition}.npz"


def save_embeddings(path: Path, queries: np.ndarray, documents: np.ndarray, hashes: np.ndarray,
                    made_with: str) -> None:
    """Store both matrices as float16 (atomically), with each row's pair content hash (``uint64``)
    and ``made_with``, what encoded them (the model's weights and the encoding code)."""
    buf = io.BytesIO()
    np.savez(buf, queries=queries.astype(np.float16), documents=documents.astype(np.float16),
             hashes=hashes.astype(np.uint64), made_with=np.array(made_with))
    write_atomic_bytes(path, buf.getvalue())


def load_embeddings(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The stored matrices as float32: exactly the values every filter decision was made on."""
    with np.load(path) as z:
        return z["queries"].astype(np.float32), z["documents"].astype(np.float32)


def stored_rows(path: Path, hashes: np.ndarray, made_with: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(for each of ``hashes``, the row of the file at ``path`` that holds that pair, -1 where none
    does; the file's queries and documents as float32) when the file was made the same way
    (``made_with``); every row -1 and no matrix when there is no file, it was made otherwise, or
    it predates the content hashes. Memory: the one file's matrices."""
    missing = np.full(len(hashes), -1, dtype=np.int64), np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32)
    if not path.is_file():
        return missing
    with np.load(path) as z:
        if "hashes" not in z.files or str(z["made_with"]) != made_with:
            return missing
        stored = z["hashes"]
        if not len(stored):
            return missing
        order = np.argsort(stored, kind="stable")
        at = np.minimum(np.searchsorted(stored[order], hashes), len(stored) - 1)
        found = np.where(stored[order][at] == hashes, order[at], -1)
        return found, z["queries"].astype(np.float32), z["documents"].astype(np.float32)
