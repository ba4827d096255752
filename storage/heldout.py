"""The held-out split a data root keeps, ``DATA_ROOT/state/heldout.json``: where its test and
validation sets end in content-hash order (each a threshold: the hash of the last pair the
root's first split took and how many pairs of that hash it took), per number of pairs asked,
written once and read by every later split of the root (``mosaic_core.trainer.heldout``); and
the content hashes of the test pairs of the root's last run, to say how the test set changed.

A few hundred bytes and about 25 per test pair, however many pairs the root holds."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from storage.examples import split_of
from storage.layout import DataLayout, data_root_of
from storage.parquet import write_atomic_bytes

Threshold = tuple[int, int]
"""(content hash of the last pair a set took, how many pairs of that hash it took)."""


def split_origin(source: str) -> Path | None:
    """The data root whose recorded split applies to the pairs ``source``: the root itself, or
    the root an examples file derived from its pairs names (mined negatives, a teacher's
    margins); None for any other pairs file."""
    path = Path(source).expanduser().resolve()
    if path.suffix == ".arrow" and path.is_file():
        return split_of(path)
    return path if data_root_of(path) == path else None


def _read(root: Path) -> dict:
    path = DataLayout(root).heldout_record_path
    return json.loads(path.read_text()) if path.is_file() else {}


def _threshold(entry: list | None) -> Threshold | None:
    return (int(entry[0], 16), int(entry[1])) if entry else None


def recorded_thresholds(source: str, n_test: int, n_validation: int) -> tuple[Threshold | None, Threshold | None]:
    """(test, validation) thresholds recorded for ``n_test`` test and ``n_validation`` validation
    pairs by the data root of ``source`` (:func:`split_origin`); None where none is."""
    root = split_origin(source)
    record = _read(root) if root is not None else {}
    return (_threshold(record.get("test", {}).get(str(n_test))),
            _threshold(record.get("validation", {}).get(f"{n_test}/{n_validation}")))


def last_test_set(data_root: str, n_test: int) -> tuple[np.ndarray, str] | None:
    """(content hashes, when recorded) of the test pairs of ``data_root``'s last run that asked
    for ``n_test``; None before the first."""
    entry = _read(Path(data_root).expanduser().resolve()).get("last_test", {}).get(str(n_test))
    if entry is None:
        return None
    return np.array([int(h, 16) for h in entry["hashes"]], dtype=np.uint64), entry["at"]


def record_split(data_root: str, n_test: int, n_validation: int, test: Threshold, validation: Threshold,
                 test_hashes: np.ndarray) -> None:
    """Record the thresholds of a split of ``data_root`` where none is recorded yet for these
    numbers (a recorded one is never replaced: that is what keeps the split), and ``test_hashes``
    as its last run's test pairs; atomically (the caller holds the root's writer lock)."""
    root = Path(data_root).expanduser().resolve()
    record = _read(root)
    record.setdefault("test", {}).setdefault(str(n_test), [f"{test[0]:016x}", test[1]])
    record.setdefault("validation", {}).setdefault(f"{n_test}/{n_validation}", [f"{validation[0]:016x}", validation[1]])
    record.setdefault("last_test", {})[str(n_test)] = {
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hashes": [f"{int(h):016x}" for h in np.sort(test_hashes)]}
    path = DataLayout(root).heldout_record_path
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic_bytes(path, json.dumps(record, indent=1).encode())
