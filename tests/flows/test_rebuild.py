import json
from pathlib import Path

import pytest
import yaml
from builders import pubmed_xml, tiny_bert, tiny_pipeline_yaml, varied_articles, write_xml

from flows.rebuild import rebuild
from storage.catalog import Catalog
from storage.layout import DataLayout
from storage.published import current_model

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_rebuild_runs_only_when_the_mirror_has_new_files_on_dask(tmp_path, http_mirror):
    base_url, mirror, _ = http_mirror
    write_xml(mirror / "pubmed" / "baseline" / "pubmed26n0001.xml.gz", pubmed_xml(varied_articles(1, 24)),
              md5_sidecar=True)
    config = tiny_pipeline_yaml(tmp_path / "pipeline.yaml", base_url, str(tiny_bert(tmp_path / "base")), workers=2,
                                control="contrastive", gate={"beat_control": True})
    cfg = yaml.safe_load(config.read_text())
    cfg["train"]["stages"][-1]["matryoshka_dims"] = [32, 8]  # the final stage trained for an 8-d cut too
    config.write_text(yaml.safe_dump(cfg))
    root = tmp_path / "root"

    first = rebuild(str(config), str(root))
    assert first["rebuilt"] and first["changes"]["new"] == ["pubmed26n0001"]
    decision = first["decision"]  # published exactly when the final model is not worse than the base nor the control
    base, control = decision["references"]["base"], decision["references"]["control"]
    assert decision["published"] == all(decision["scores"][t] >= max(base[t], control[t]) for t in base)
    assert control.keys() == {"heldout"} and base.keys() == {"heldout", "heldout@32", "heldout@8"}
    record = json.loads((root / "models" / "control" / "1-control" / "stage.json").read_text())
    assert record["config"]["kind"] == "contrastive" and record["config"]["max_steps"] == 4  # 2 + 2 steps
    assert "plain fine-tuning of the base (the control)" in (root / "report" / "report.md").read_text()
    card = (Path(first["final_model"]) / "README.md").read_text()
    assert "| control | Δ |" in card and "Truncated embeddings" in card
    assert {s["task"] for s in first["scores"]["contrastive"]} == {"heldout", "heldout@32", "heldout@8"}
    assert (current_model(DataLayout(root)) is not None) == decision["published"]
    assert (root / "report" / "report.html").is_file()
    with Catalog(DataLayout(root)) as cat:  # both evaluations (whole and cut embeddings) and the decision: one run
        cat.refresh()
        runs, tasks = cat.rows("SELECT DISTINCT run_id FROM eval_history"), cat.rows("SELECT task FROM eval_history")
    assert runs == [(decision["run_id"],)] and {t for (t,) in tasks} == {"heldout", "heldout@32", "heldout@8"}
    assert json.loads(DataLayout(root).snapshot_state_path.read_text()) == {"pubmed26n0001": "pubmed26n0001.xml.gz"}
    ingest_manifest = root / "manifests" / "ingest" / "pubmed26n0001.json"
    written = ingest_manifest.stat().st_mtime_ns

    again = rebuild(str(config), str(root))
    assert not again["rebuilt"] and again["changes"] == {"new": [], "changed": [], "removed": []}

    write_xml(mirror / "pubmed" / "updatefiles" / "pubmed26n0002.xml.gz", pubmed_xml(varied_articles(100, 12)),
              md5_sidecar=True)
    third = rebuild(str(config), str(root))
    assert third["rebuilt"] and third["changes"]["new"] == ["pubmed26n0002"]
    # The published model (if any) is a reference of the next decision and was scored with the rest.
    assert ("published" in third["decision"]["references"]) == decision["published"]
    assert ingest_manifest.stat().st_mtime_ns == written  # the old partition came from cache
    assert third["pairs"] == first["pairs"] + 12
