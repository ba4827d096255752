"""The publish gate's task and `mosaic publish` / `mosaic history` on a data root."""

import pytest
from builders import tiny_bert
from typer.testing import CliRunner

from flows.cli import app
from storage.layout import DataLayout
from storage.published import current_model
from tasks.publish import decide_and_publish

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
