import os
import shutil
import stat
from pathlib import Path

import pytest
from builders import tiny_bert

from mosaic_core.modeling.refs import check_loadable
from storage.catalog import Catalog
from storage.layout import DataLayout
from storage.published import (
    KEEP_PUBLISHED,
    PublishError,
    current_model,
    publish_model,
    published_copy,
    read_decision,
    recorded_path,
    write_decision,
)


def model(path, text):
    """A loadable tiny model, told apart by ``marker.txt``, with a checkpoints folder (not published)."""
    tiny_bert(path)
    (path / "marker.txt").write_text(text)
    (path / "checkpoints").mkdir()
    return path


def publish(layout, model_dir, run_id):
    return publish_model(layout, model_dir, run_id, check=check_loadable)


def test_publishing_copies_the_model_and_switches_the_link_atomically(tmp_path):
    layout = DataLayout(tmp_path / "root")
    assert current_model(layout) is None
    first = publish(layout, model(tmp_path / "m1", "one"), "run1")
    assert current_model(layout) == first and (first / "marker.txt").read_text() == "one"
    assert not (first / "checkpoints").exists()
    (tmp_path / "m1" / "marker.txt").write_text("retrained in place")  # the next rebuild overwrites it
    assert (current_model(layout) / "marker.txt").read_text() == "one"
    second = publish(layout, model(tmp_path / "m2", "two"), "run2")
    assert os.readlink(layout.current_model_path) == os.path.join("published", "run2")  # relative: the root may move
    assert current_model(layout) == second
    assert not list(layout.current_model_path.parent.glob(".*tmp"))
    for i in range(3, 3 + KEEP_PUBLISHED + 2):
        publish(layout, model(tmp_path / f"m{i}", str(i)), f"run{i}")
    assert len(list(layout.published_models_dir.iterdir())) == KEEP_PUBLISHED + 1
    assert current_model(layout).name == f"run{2 + KEEP_PUBLISHED + 2}"


def _state(layout):
    """What publishing must not change on refusal: the link and every entry of published/ (hidden ones too)."""
    return os.readlink(layout.current_model_path), sorted(p.name for p in layout.published_models_dir.iterdir())


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors", "tokenizer.json", "everything"])
def test_a_folder_that_does_not_load_is_refused_and_the_current_model_stays(tmp_path, missing):
    layout = DataLayout(tmp_path / "root")
    publish(layout, model(tmp_path / "good", "good"), "run1")
    before = _state(layout)
    bad = model(tmp_path / "bad", "bad")
    if missing == "everything":
        shutil.rmtree(bad)
        bad.mkdir()
    else:
        (bad / missing).unlink()
    with pytest.raises(PublishError) as refused:
        publish(layout, bad, "run2")
    assert str(bad) in str(refused.value) and "models/current is unchanged" in str(refused.value)
    assert ("tokenizer" if missing in ("tokenizer.json", "everything") else missing) in str(refused.value)
    assert _state(layout) == before
    assert current_model(layout).name == "run1" and (current_model(layout) / "marker.txt").read_text() == "good"


def test_the_copy_is_checked_not_only_the_source(tmp_path, monkeypatch):
    """A copy that went wrong silently (here: weights cut short) is not published, though the source loads."""
    layout = DataLayout(tmp_path / "root")
    publish(layout, model(tmp_path / "good", "good"), "run1")
    before = _state(layout)
    real_copytree = shutil.copytree

    def copy_cut_short(src, dst, **kw):
        out = real_copytree(src, dst, **kw)
        weights = os.path.join(dst, "model.safetensors")
        with open(weights, "r+b") as fh:
            fh.truncate(os.path.getsize(weights) // 2)
        return out

    source = model(tmp_path / "next", "next")
    check_loadable(source)
    monkeypatch.setattr("storage.published.shutil.copytree", copy_cut_short)
    with pytest.raises(PublishError, match="model.safetensors does not read"):
        publish(layout, source, "run2")
    assert _state(layout) == before


@pytest.mark.parametrize(("umask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_published_files_get_the_modes_of_every_other_file(tmp_path, umask, file_mode, dir_mode):
    previous = os.umask(umask)
    try:
        source = model(tmp_path / "m", "m")
        # safetensors writes through a 0600 temporary file: the weights a model is saved with are 0600
        assert stat.S_IMODE((source / "model.safetensors").stat().st_mode) == 0o600
        os.chmod(source / "marker.txt", 0o600)
        published = publish(DataLayout(tmp_path / "root"), source, "run1")
    finally:
        os.umask(previous)
    modes = {str(p.relative_to(published)): stat.S_IMODE(p.stat().st_mode) for p in published.rglob("*")}
    assert "model.safetensors" in modes and "tokenizer.json" in modes
    assert {p: m for p, m in modes.items() if m != file_mode and not (published / p).is_dir()} == {}
    assert {p: m for p, m in modes.items() if m != dir_mode and (published / p).is_dir()} == {}
    assert stat.S_IMODE(published.stat().st_mode) == dir_mode


def test_a_root_with_an_absolute_link_still_finds_its_model_after_a_move(tmp_path):
    """Links written before they were relative: absolute, dangling once the root moved."""
    layout = DataLayout(tmp_path / "root")
    published = publish(layout, model(tmp_path / "m", "m"), "run1")
    layout.current_model_path.unlink()
    os.symlink(published, layout.current_model_path)  # as it used to be written
    os.rename(tmp_path / "root", tmp_path / "moved")
    moved = DataLayout(tmp_path / "moved")
    assert current_model(moved) == moved.published_models_dir / "run1"
    old_path = str(published)  # what the decision records hold
    assert published_copy(moved, old_path) == moved.published_models_dir / "run1"
    assert published_copy(moved, str(tmp_path / "root" / "models" / "published" / "gone")) is None
    record = {"data_root": str(tmp_path / "root")}
    assert recorded_path(moved, record, str(tmp_path / "root" / "models" / "final")) == moved.models_dir / "final"
    assert recorded_path(moved, {}, "/elsewhere/final") == Path("/elsewhere/final")  # an older record: as it is


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


@pytest.mark.parametrize("kind", ["checkpoint", "dense stage", "sparse stage", "roberta", "xlmr", "offline base"])
def test_every_kind_of_model_the_pipeline_writes_is_published_and_loads(tmp_path, kind):
    """What the stages save (sentence-transformers dense, SparseEncoder with the head in the
    masked-LM checkpoint), tiny encoders of each tokenizer family, and the offline base."""
    from builders import tiny_encoder
    from sentence_transformers import SentenceTransformer, SparseEncoder

    from mosaic_core.modeling.dual_encoder import build_model, save_model
    from mosaic_core.modeling.refs import OFFLINE_MODEL, resolve_model

    if kind in ("dense stage", "sparse stage"):
        base = tiny_bert(tmp_path / "base", mlm_head=kind == "sparse stage")
        source = tmp_path / "stage"
        save_model(build_model(str(base), kind=kind.split()[0])[0], str(base), source)
    elif kind in ("roberta", "xlmr"):
        source = tiny_encoder(tmp_path / kind, kind)
    else:
        source = tiny_bert(tmp_path / "m") if kind == "checkpoint" else resolve_model(OFFLINE_MODEL)
    published = publish(DataLayout(tmp_path / "root"), source, "run1")
    loader = SparseEncoder if kind == "sparse stage" else SentenceTransformer
    assert loader(str(tmp_path / "root" / "models" / "current"), device="cpu").encode(["the cell"]).shape[0] == 1
    assert check_loadable(published) == published
