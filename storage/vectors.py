"""The evaluation's embedding cache: what a model made of each text of a task, so that scoring a
model again on a task that changed (a data root's held-out pairs, which grow with the corpus)
encodes only the texts it has not encoded before.

``DATA_ROOT/cache/vectors/<model>/<task>/<role>/vectors.npz``: one folder per model and encoding
settings (:func:`model_folder`), one file per task and role (mteb's ``query`` and ``document``),
each row a text's content hash and its float32 vector (the very values a fresh encoding scored).
A file is written whole and atomically; one that does not read is dropped and its texts encoded
again. :class:`TaskVectors` is the store the evaluation's encoder asks
(:class:`~mosaic_core.evaluate.scoring.KeptVectors`, in mteb's cache backend protocol);
:func:`keep_models` removes the folders of models a run no longer scores.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from storage.layout import DataLayout
from storage.parquet import write_atomic_bytes

log = logging.getLogger(__name__)
FILE = "vectors.npz"


def vectors_dir(data_root: str | Path) -> Path:
    return DataLayout(data_root).root / "cache" / "vectors"


def model_folder(data_root: str | Path, fingerprint: str, settings: dict) -> Path:
    """The folder of a model's vectors: its weights' ``fingerprint`` and what else shapes its
    embeddings (``settings``: prompts, kind, dimensions, batch size), digested."""
    digest = hashlib.blake2b(json.dumps(settings, sort_keys=True, default=str).encode(), digest_size=6).hexdigest()
    return vectors_dir(data_root) / f"{fingerprint}-{digest}"


def keep_models(data_root: str | Path, folders: list[Path]) -> list[str]:
    """Remove every model folder of the cache but ``folders`` (a run's models: the next run's base
    and published model are among them); returns the names removed."""
    root, keep = vectors_dir(data_root), {Path(f).name for f in folders}
    gone = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name not in keep) if root.is_dir() else []
    for name in gone:
        shutil.rmtree(root / name, ignore_errors=True)
    return gone


def text_hash(item: dict[str, Any]) -> int | None:
    """``uint64`` content hash of an item's texts (every string field but its id); None for an
    item without text, which is never cached."""
    texts = {k: v for k, v in item.items() if k != "id" and isinstance(v, str)}
    if not texts:
        return None
    return int.from_bytes(hashlib.blake2b(json.dumps(texts, sort_keys=True).encode(), digest_size=8).digest(), "big")


class TaskVectors:
    """The vectors of one model, task and role, read whole, added to, written whole (mteb's
    cache backend protocol: ``load``, ``add``, ``get_vector``, ``save``, ``close``)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / FILE
        self.rows: dict[int, np.ndarray] = {}
        self._added = False

    def load(self) -> None:
        if not self.path.is_file():
            return
        try:
            with np.load(self.path) as z:
                self.rows = dict(zip(z["hashes"].tolist(), z["vectors"], strict=True))
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            log.warning("embedding cache %s does not read (%s): dropped, its texts are encoded again", self.path, exc)
            self.rows = {}

    def add(self, items: list[dict[str, Any]], vectors) -> None:
        for item, vector in zip(items, np.asarray(vectors, dtype=np.float32), strict=True):
            if (h := text_hash(item)) is not None:
                self.rows[h] = vector
                self._added = True

    def get_vector(self, item: dict[str, Any]) -> np.ndarray | None:
        h = text_hash(item)
        return None if h is None else self.rows.get(h)

    def __contains__(self, item: dict[str, Any]) -> bool:
        return self.get_vector(item) is not None

    def save(self) -> None:
        if not self._added:
            return
        buf = io.BytesIO()
        np.savez(buf, hashes=np.fromiter(self.rows, dtype=np.uint64, count=len(self.rows)),
                 vectors=np.stack(list(self.rows.values())))
        write_atomic_bytes(self.path, buf.getvalue())
        self._added = False

    def close(self) -> None:
        self.rows = {}
