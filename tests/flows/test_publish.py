"""The publish gate's task and `mosaic publish` / `mosaic history` on a data root."""

import os

import pytest
from builders import tiny_bert
from typer.testing import CliRunner

from cli import app
from storage.layout import DataLayout
from storage.published import PublishError, current_model, read_decision
from tasks.publish import decide_and_publish, publish_by_hand

pytestmark = pytest.mark.usefixtures("prefect_harness")
runner = CliRunner(env={"COLUMNS": "300"})  # tables unwrapped


def scores(**by_model: tuple[float, float]) -> dict[str, list[dict]]:
    return {m: [{"task": "heldout", "value": h}, {"task": "scifact", "value": s}] for m, (h, s) in by_model.items()}


def test_a_worse_model_is_not_published_and_the_previous_one_stays(tmp_path):
    root = str(tmp_path / "root")
    good, bad = tiny_bert(tmp_path / "good"), tiny_bert(tmp_path / "bad", hidden=16)
    models = {"base": "offline:all-MiniLM-L6-v2", "final": str(good)}
    first = decide_and_publish.fn("run1", "final", models, scores(base=(0.80, 0.60), final=(0.85, 0.60)), ["base"],
                                  ["heldout", "scifact"], 0.0, root)
    assert first["published"] and current_model(DataLayout(root)) == DataLayout(root).published_models_dir / "run1"
    rerun = decide_and_publish.fn("run1-again", "final", models, scores(base=(0.80, 0.60), final=(0.85, 0.60)),
                                  ["base"], ["heldout", "scifact"], 0.0, root)  # a cached rerun: the same model
    assert rerun["published"] and rerun["published_path"] == first["published_path"]
    assert "already published" in rerun["message"]
    assert [p.name for p in DataLayout(root).published_models_dir.iterdir()] == ["run1"]  # not copied again
    models = {**models, "final": str(bad), "published": str(current_model(DataLayout(root)))}
    second = decide_and_publish.fn("run2", "final", models,
                                   scores(base=(0.80, 0.60), final=(0.90, 0.58), published=(0.85, 0.60)),
                                   ["base", "published"], ["heldout", "scifact"], 0.0, root)
    assert not second["published"] and second["check"]["severity"] == "WARN"
    assert second["message"] == "not published: final 58.00 < base 60.00 on scifact; final 58.00 < published 60.00 " \
                                "on scifact"
    assert current_model(DataLayout(root)).name == "run1"  # the previous model stays published
    tolerant = decide_and_publish.fn("run3", "final", models,
                                     scores(base=(0.80, 0.60), final=(0.90, 0.58), published=(0.85, 0.60)),
                                     ["base", "published"], ["heldout", "scifact"], 2.0, root)
    assert tolerant["published"] and current_model(DataLayout(root)).name == "run3"

    out = runner.invoke(app, ["history", "-d", root]).output
    assert "run2" in out and "not published: final 58.00 < base 60.00" in out
    refused = runner.invoke(app, ["publish", "run2", "-d", root])  # a failed gate needs --force
    assert refused.exit_code == 2 and "--force" in refused.output
    rolled_back = runner.invoke(app, ["publish", "run1", "-d", root, "--reason", "roll back"])
    assert rolled_back.exit_code == 0, rolled_back.output
    assert current_model(DataLayout(root)).name == "run1-republished"
    forced = runner.invoke(app, ["publish", "run2", "-d", root, "--force", "--reason", "better on our benchmark"])
    assert forced.exit_code == 0, forced.output
    assert current_model(DataLayout(root)).name == "run2-republished"
    assert "yes (forced)" in runner.invoke(app, ["history", "-d", root]).output


def _published_state(root):
    layout = DataLayout(root)
    return (os.readlink(layout.current_model_path), sorted(p.name for p in layout.published_models_dir.iterdir()),
            sorted(p.name for p in layout.decisions_dir.iterdir()))


@pytest.mark.parametrize("what", ["an empty folder", "a model without its tokenizer"])
def test_publish_refuses_a_folder_that_does_not_load_even_with_force(tmp_path, what):
    root = str(tmp_path / "root")
    publish_by_hand.fn(str(tiny_bert(tmp_path / "good")), root, "first", force=True)
    before = _published_state(root)
    bad = tmp_path / "bad"
    if what == "an empty folder":
        bad.mkdir()
    else:
        tiny_bert(bad)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (bad / name).unlink()
    with pytest.raises(PublishError) as refused:
        publish_by_hand.fn(str(bad), root, "try", force=True)
    message = str(refused.value)
    assert "\n" not in message and str(bad) in message and "--force or not" in message  # one line for the CLI
    assert ("no config.json" if what == "an empty folder" else "no tokenizer") in message
    assert _published_state(root) == before  # the link, the published copies and the decisions as they were
    assert (current_model(DataLayout(root)) / "config.json").is_file()


def test_a_gate_passed_model_that_does_not_load_is_not_published(tmp_path):
    root = str(tmp_path / "root")
    good, bad = tiny_bert(tmp_path / "good"), tiny_bert(tmp_path / "bad")
    (bad / "model.safetensors").unlink()
    models = {"base": "offline:all-MiniLM-L6-v2", "final": str(good)}
    decide_and_publish.fn("run1", "final", models, scores(base=(0.80, 0.60), final=(0.85, 0.60)), ["base"],
                          ["heldout", "scifact"], 0.0, root)
    before = os.readlink(DataLayout(root).current_model_path)
    with pytest.raises(PublishError, match=f"{bad} was not published.*no weights"):
        decide_and_publish.fn("run2", "final", {**models, "final": str(bad)},
                              scores(base=(0.80, 0.60), final=(0.90, 0.60)), ["base"], ["heldout", "scifact"], 0.0,
                              root)
    assert os.readlink(DataLayout(root).current_model_path) == before
    assert [p.name for p in DataLayout(root).published_models_dir.iterdir()] == ["run1"]
    decided = read_decision(DataLayout(root), "run2")
    assert not decided["published"] and decided["published_path"] is None and "no weights" in decided["message"]
