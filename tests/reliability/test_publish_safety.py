"""The published model survives what happens to a data root: a moved or remounted root, a
bad folder published by hand, the umask of whoever publishes."""

import os
import shutil
import stat

import pytest
from builders import tiny_bert

from storage.layout import DataLayout
from storage.published import PublishError, current_model, read_decision
from tasks.publish import decide_and_publish, publish_by_hand

pytestmark = pytest.mark.usefixtures("prefect_harness")
GATE = (["base"], ["heldout"], 0.0)


def scores(final: float) -> dict[str, list[dict]]:
    return {"base": [{"task": "heldout", "value": 0.5}], "final": [{"task": "heldout", "value": final}]}


def decide(run_id: str, model, root, final: float = 0.6) -> dict:
    models = {"base": "offline:all-MiniLM-L6-v2", "final": str(model)}
    return decide_and_publish.fn(run_id, "final", models, scores(final), *GATE, str(root))


def test_a_moved_root_still_serves_its_model_and_rolls_back_by_run_id(tmp_path):
    from sentence_transformers import SentenceTransformer

    old_root, new_root = tmp_path / "old" / "root", tmp_path / "mnt" / "root"
    first, second = tiny_bert(tmp_path / "first"), tiny_bert(tmp_path / "second", hidden=16)
    assert decide("run1", first, old_root)["published"]
    assert decide("run2", second, old_root)["published"]
    turned_down = tiny_bert(old_root / "models" / "final")  # a run's output inside the root, gate failed
    assert not decide("run3", turned_down, old_root, final=0.4)["published"]
    assert os.readlink(old_root / "models" / "current") == os.path.join("published", "run2")

    new_root.parent.mkdir()
    shutil.move(old_root, new_root)
    assert not old_root.exists()
    layout = DataLayout(new_root)
    assert current_model(layout) == layout.published_models_dir / "run2" and current_model(layout).is_dir()
    served = SentenceTransformer(str(new_root / "models" / "current"), device="cpu")
    assert served.encode(["the patient"]).shape == (1, 16)
    assert read_decision(layout, "run1")["published_path"].startswith(str(old_root))  # records keep old paths

    rolled_back = publish_by_hand.fn("run1", str(new_root), "roll back after the move", force=False)
    assert current_model(layout) == layout.published_models_dir / "run1-republished"
    assert rolled_back["candidate"] == str(layout.published_models_dir / "run1")
    assert rolled_back["previous"] == str(layout.published_models_dir / "run2")
    assert SentenceTransformer(str(new_root / "models" / "current"), device="cpu").encode(["a"]).shape == (1, 32)
    # the copy in use is recognised by its run's record after the move: not copied again
    again = decide("run4", first, new_root)
    assert "already published" in again["message"] and current_model(layout).name == "run1-republished"
    # a turned-down run's output inside the root is found where the root is now
    forced = publish_by_hand.fn("run3", str(new_root), "forced after the move", force=True)
    assert forced["candidate"] == str(new_root / "models" / "final")
    assert current_model(layout).name == "run3-republished"


def test_publishing_an_empty_folder_with_force_keeps_the_served_model(tmp_path):
    root = tmp_path / "root"
    assert decide("run1", tiny_bert(tmp_path / "good"), root)["published"]
    layout = DataLayout(root)
    link, copies = os.readlink(layout.current_model_path), sorted(os.listdir(layout.published_models_dir))
    decisions = sorted(os.listdir(layout.decisions_dir))
    (tmp_path / "empty").mkdir()
    with pytest.raises(PublishError, match=r"empty cannot be published, --force or not: .*no config\.json.*no weights"):
        publish_by_hand.fn(str(tmp_path / "empty"), str(root), "oops", force=True)
    assert os.readlink(layout.current_model_path) == link
    assert sorted(os.listdir(layout.published_models_dir)) == copies
    assert sorted(os.listdir(layout.decisions_dir)) == decisions
    assert (current_model(layout) / "config.json").is_file()


def test_what_the_gate_publishes_is_readable_by_everyone_the_umask_lets(tmp_path):
    previous = os.umask(0o022)
    try:
        model = tiny_bert(tmp_path / "trained")
        assert stat.S_IMODE((model / "model.safetensors").stat().st_mode) == 0o600  # as save_pretrained leaves it
        published = decide("run1", model, tmp_path / "root")["published_path"]
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(os.stat(p).st_mode) for p in (tmp_path / "root" / "models" / "published" / "run1")
             .rglob("*")}
    assert published == str(DataLayout(tmp_path / "root").published_models_dir / "run1")
    assert modes and set(modes.values()) == {0o644}, modes
