import os

import pytest

from storage.catalog import Catalog
from storage.layout import DataLayout
from storage.published import KEEP_PUBLISHED, PublishError, current_model, publish_model, read_decision, write_decision


def model(path, text):
    path.mkdir(parents=True)
    (path / "model.safetensors").write_text(text)
    (path / "checkpoints").mkdir()
    return path


def test_publishing_copies_the_model_and_switches_the_link_atomically(tmp_path):
    layout = DataLayout(tmp_path / "root")
    assert current_model(layout) is None
    first = publish_model(layout, model(tmp_path / "m1", "one"), "run1")
    assert current_model(layout) == first and (first / "model.safetensors").read_text() == "one"
    assert not (first / "checkpoints").exists()
    (tmp_path / "m1" / "model.safetensors").write_text("retrained in place")  # the next rebuild overwrites it
    assert (current_model(layout) / "model.safetensors").read_text() == "one"
    second = publish_model(layout, model(tmp_path / "m2", "two"), "run2")
    assert os.readlink(layout.current_model_path) == str(second)
    assert not list(layout.current_model_path.parent.glob(".*tmp"))
    for i in range(3, 3 + KEEP_PUBLISHED + 2):
        publish_model(layout, model(tmp_path / f"m{i}", str(i)), f"run{i}")
    assert len(list(layout.published_models_dir.iterdir())) == KEEP_PUBLISHED + 1


def test_decisions_are_records_the_catalog_reads(tmp_path):
    layout = DataLayout(tmp_path / "root")
    write_decision(layout, {"run_id": "r1", "candidate": "/m", "candidate_fingerprint": "f", "published": False,
                            "forced": False, "published_path": None, "previous": None,
                            "message": "not published: adapted 62.00 < base 66.00 on scifact",
                            "scores": {"scifact": 0.62}})
    write_decision(layout, {"run_id": "r2", "candidate": "/m", "candidate_fingerprint": "f", "published": True,
                            "forced": True, "published_path": "/p", "previous": None, "message": "forced",
                            "scores": {}})
    with Catalog(layout) as cat:
        cat.refresh()
        assert [r[1:4] for r in cat.decisions(10)] == [("r2", True, True), ("r1", False, False)]
        assert cat.rows("SELECT run_id FROM published_models") == [("r2",)]
        assert cat.rows("SELECT scores['scifact'] FROM publish_decisions WHERE run_id = 'r1'") == [(0.62,)]
    assert read_decision(layout, "r1")["scores"] == {"scifact": 0.62}
    with pytest.raises(PublishError, match="no decision recorded for run 'r9'.*r1, r2"):
        read_decision(layout, "r9")
