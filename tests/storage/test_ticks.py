"""A data root's tick records and trained pairs: written atomically, model paths kept relative."""

import shutil

import numpy as np

from storage.layout import DataLayout
from storage.ticks import append_tick, last_tick, read_ticks, trained_pairs


def test_ticks_round_trip_and_follow_a_moved_root(tmp_path):
    root = tmp_path / "root"
    assert read_ticks(str(root)) == [] and last_tick(str(root)) is None and len(trained_pairs(str(root))) == 0
    adapted = DataLayout(root).models_dir / "2-joint"
    adapted.mkdir(parents=True)
    append_tick(str(root), {"tick": 1, "kind": "full", "models": {"adapted": str(adapted)}},
                np.array([5, 3, 2**63 + 1], dtype=np.uint64))
    assert trained_pairs(str(root)).tolist() == [3, 5, 2**63 + 1]  # sorted, the full 64 bits
    assert '"adapted": "2-joint"' in DataLayout(root).ticks_path.read_text()  # relative to models/
    shutil.move(root, tmp_path / "moved")
    [tick] = read_ticks(str(tmp_path / "moved"))
    assert tick["models"]["adapted"] == str((tmp_path / "moved" / "models" / "2-joint").resolve())
    assert last_tick(str(tmp_path / "moved"))["models_present"]
    shutil.rmtree(tmp_path / "moved" / "models" / "2-joint")
    assert not last_tick(str(tmp_path / "moved"))["models_present"]
