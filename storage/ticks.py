"""A data root's ticks (:mod:`mosaic_core.trainer.continual`): ``DATA_ROOT/state/ticks.json``, one record
per run that trained (full or update), oldest first; and the content hashes of the pairs its live
models trained on, ``DATA_ROOT/state/trained_pairs.parquet`` (8 bytes a pair, one ``uint64``
column), which tell the next run which pairs are new. Both are written atomically, by the run
that holds the root's lock, after its publish decision: a run that fails leaves the last tick
as it was, so the next run redoes the tick."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from storage.layout import DataLayout
from storage.parquet import write_atomic_bytes


def read_ticks(data_root: str) -> list[dict]:
    """The root's tick records, oldest first (none before its first tick); a model path is
    resolved against where the root is now (records keep them relative to ``models/``)."""
    layout = DataLayout(data_root)
    path = layout.ticks_path
    if not path.is_file():
        return []
    ticks = json.loads(path.read_text())
    for t in ticks:
        t["models"] = {k: str(layout.models_dir / v) for k, v in t.get("models", {}).items()}
    return ticks


def last_tick(data_root: str) -> dict | None:
    """The last tick's record, with ``models_present`` saying whether its models are all still there."""
    ticks = read_ticks(data_root)
    if not ticks:
        return None
    last = ticks[-1]
    return {**last, "models_present": all(Path(p).is_dir() for p in last["models"].values())}


def append_tick(data_root: str, record: dict, trained: np.ndarray) -> None:
    """Add ``record`` (its ``models``: name → a folder under ``models/``) and replace the trained
    pairs' hashes with ``trained`` (``uint64 [n]``)."""
    layout = DataLayout(data_root)
    ticks = json.loads(layout.ticks_path.read_text()) if layout.ticks_path.is_file() else []
    models = {k: os.path.relpath(Path(v).resolve(), layout.models_dir) for k, v in record["models"].items()}
    buffer = io.BytesIO()
    pq.write_table(pa.table({"hash": pa.array(np.sort(trained.astype(np.uint64)), pa.uint64())}), buffer)
    # The record first: a crash before the hashes are written leaves the tick's new pairs "new"
    # (trained again next time), never "trained" by models that did not see them.
    write_atomic_bytes(layout.ticks_path, json.dumps([*ticks, {**record, "models": models}], indent=1).encode())
    write_atomic_bytes(layout.trained_pairs_path, buffer.getvalue())


def trained_pairs(data_root: str) -> np.ndarray:
    """``uint64 [n]``, sorted: the content hashes of the pairs the live models trained on (empty
    before the first tick)."""
    path = DataLayout(data_root).trained_pairs_path
    if not path.is_file():
        return np.zeros(0, np.uint64)
    return pq.read_table(path).column("hash").to_numpy().astype(np.uint64)
