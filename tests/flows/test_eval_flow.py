import json

import pytest
from builders import tiny_bert
from typer.testing import CliRunner

from cli import app
from flows.evaluate import EvaluationInputError, eval_flow
from mosaic_core.config import EvalConfig
from mosaic_core.eval_tasks import BeirTask, HeldoutTask, StsTask
from storage.catalog import Catalog
from storage.layout import DataLayout

pytestmark = pytest.mark.usefixtures("prefect_harness")

PAIRS = [{"query": f"cells {i} of the patient", "document": f"the patient {i} was q with cells and a cell {i % 3}"}
         for i in range(40)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"a": str(tiny_bert(root / "a")), "b": str(tiny_bert(root / "b", hidden=48))}


def test_eval_flow_reports_records_history_and_caches(models, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    sts = tmp_path / "sts.csv"
    sts.write_text("sentence1,sentence2,score\nthe patient,a patient,5\ncells,the q,1\na cell,cells,4\nq,with,0\n")
    cfg = EvalConfig(tasks=(HeldoutTask(name="heldout", path=str(pairs), heldout_pairs=8, pool=20),
                            StsTask(name="toy-sts", path=str(sts))))
    root = tmp_path / "root"
    out = eval_flow(models, cfg, str(tmp_path / "report"), str(root))
    assert [s["task"] for s in out["scores"]["a"]] == ["heldout", "toy-sts"]
    heldout = out["scores"]["b"][0]
    assert heldout["n"] == 8 and len(heldout["per_query"]) == 8
    assert (tmp_path / "report" / "report.html").exists() and (tmp_path / "report" / "ndcg_boxplot.png").exists()
    again = eval_flow(models, cfg, str(tmp_path / "report2"), str(root))
    assert again["scores"] == out["scores"]  # cached per (model, task)
    with Catalog(DataLayout(root)) as cat:
        cat.refresh()
        rows = cat.rows("SELECT count(DISTINCT run_id), count(*) FROM eval_history")
    assert rows == [(2, 8)]
    result = CliRunner().invoke(app, ["history", "-d", str(root), "--task", "toy-sts"])
    assert result.exit_code == 0 and "toy-sts" in result.output and "heldout" not in result.output


def test_unavailable_task_stops_before_scoring_or_is_reported(models, tmp_path):
    cfg = EvalConfig(tasks=(BeirTask(name="missing", path=str(tmp_path / "nope")),))
    with pytest.raises(EvaluationInputError, match="qrels"):
        eval_flow(models, cfg, str(tmp_path / "r"))
    result = CliRunner().invoke(app, ["eval", "--model", models["a"], "--out", str(tmp_path / "r"),
                                      "--beir", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "unavailable evaluation tasks" in result.output


def test_eval_dims_scores_each_dimension_and_reports_the_table(models, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    out, root = tmp_path / "report", tmp_path / "root"
    result = CliRunner().invoke(app, ["eval", "--model", f"a={models['a']}", "--heldout", str(pairs), "--heldout-pairs",
                                      "8", "--pool", "20", "--dims", "32,8", "--out", str(out), "-d", str(root)])
    assert result.exit_code == 0, result.output
    scores = json.loads((out / "results.json").read_text())["scores"]["a"]
    assert [(s["task"], s["dim"]) for s in scores] == [("heldout@32", 32), ("heldout@8", 8)]
    assert scores[0]["per_query"] != scores[1]["per_query"]
    assert "| model | task | 32 d | 8 d |" in (out / "report.md").read_text()
    with Catalog(DataLayout(root)) as cat:
        cat.refresh()
        assert sorted(cat.rows("SELECT task FROM eval_history")) == [("heldout@32",), ("heldout@8",)]


def test_a_pipeline_s_evaluation_encodes_only_the_texts_its_models_have_not_encoded(models, tmp_path, monkeypatch):
    from mteb.models import SentenceTransformerEncoderWrapper

    from storage.vectors import vectors_dir

    encoded = []
    encode = SentenceTransformerEncoderWrapper.encode
    monkeypatch.setattr(SentenceTransformerEncoderWrapper, "encode",
                        lambda self, inputs, **kw: encoded.append(len(inputs.dataset)) or encode(self, inputs, **kw))
    pairs, root = tmp_path / "pairs.jsonl", str(tmp_path / "root")
    pairs.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    cfg = EvalConfig(tasks=(HeldoutTask(name="heldout", path=str(pairs), heldout_pairs=8, pool=20),))
    first = eval_flow(models, cfg, str(tmp_path / "r1"), root, keep_vectors=("a", "b"))
    assert sum(encoded) == 2 * (8 + 28)  # each model: 8 queries, 28 documents
    more = [{"query": f"q cells {i}", "document": f"a cell {i} and the patient with q"} for i in range(40, 52)]
    pairs.write_text("".join(json.dumps(p) + "\n" for p in PAIRS + more))  # the held-out task changes
    encoded.clear()
    cached = eval_flow(models, cfg, str(tmp_path / "r2"), root, keep_vectors=("a", "b"))
    assert 0 < sum(encoded) < 2 * (8 + 28)  # the new held-out pairs and distractors alone
    encoded.clear()
    fresh = eval_flow(models, cfg.model_copy(update={"batch_size": 16}), str(tmp_path / "r3"))  # every text again
    assert sum(encoded) == 2 * (8 + 28)
    assert cached["scores"] != first["scores"]
    for m in models:
        assert cached["scores"][m][0]["per_query"] == pytest.approx(fresh["scores"][m][0]["per_query"], abs=1e-6)
    assert len([p for p in vectors_dir(root).iterdir()]) == 2
    eval_flow(models, cfg, str(tmp_path / "r4"), root, keep_vectors=("a",))
    assert len([p for p in vectors_dir(root).iterdir()]) == 1  # the cache keeps the models a run keeps


def test_kept_vectors_score_titled_documents_as_a_fresh_encoding_does(models, tmp_path):
    from storage.benchmarks import write_beir

    corpus = [{"id": f"d{i}", "title": f"cells {i % 4}", "text": f"the patient {i} was q with a cell"}
              for i in range(12)]
    queries = {f"q{i}": f"cells {i % 4} patient {i}" for i in range(6)}
    write_beir(tmp_path / "beir", corpus, queries, {f"q{i}": {f"d{i}": 1} for i in range(6)})
    cfg = EvalConfig(tasks=(BeirTask(name="titled", path=str(tmp_path / "beir")),))
    kept = eval_flow(models, cfg, str(tmp_path / "r1"), str(tmp_path / "root"), keep_vectors=("a", "b"))
    fresh = eval_flow(models, cfg.model_copy(update={"batch_size": 16}), str(tmp_path / "r2"))
    for m in models:  # each title read once, as mteb reads it: not twice
        assert kept["scores"][m][0]["per_query"] == pytest.approx(fresh["scores"][m][0]["per_query"], abs=1e-6)
