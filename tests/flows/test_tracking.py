"""MLflow tracking against a real local store, read back with MlflowClient: a run with nested
stage runs (params, metrics with steps, artifacts), no duplicate on a cached rerun, and a lost
server that only warns."""

import json
import logging

import pytest
from builders import stage1_config, tiny_bert

from flows.train import train_flow
from mosaic_core.config import StageConfig, TrackingConfig, TrainConfig
from mosaic_core.vocab.build import build_expanded_model
from tasks import tracking

mlflow = pytest.importorskip("mlflow")
pytest.importorskip("tensorboard")
from mlflow.tracking import MlflowClient  # noqa: E402

TOPICS = ["cardiomyopathy", "immunotherapy", "hepatocytes", "nephropathy", "angiogenesis", "leukocytes"]
PAIRS = [{"query": f"{t} in patients {i}", "document": f"patients with {t} were treated; {t} and cells {i}"}
         for i in range(5) for t in TOPICS]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("track")
    corpus = root / "pairs.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    stage1 = root / "stage1"
    build_expanded_model([t for p in PAIRS for t in p.values()] * 3, stage1,
                         stage1_config(tiny_bert(root / "base"), vocab_size=300))
    return str(stage1), str(corpus)


def config() -> TrainConfig:
    common = dict(batch_size=6, chunk_size=3, max_steps=3, lr=1e-3, precision="fp32", checkpoint_every=1,
                  log_every=1, eval_every=3)
    return TrainConfig(stages=(StageConfig(name="joint", kind="joint", **common),
                               StageConfig(name="contrastive", kind="contrastive", **common)),
                       heldout_pairs=4, validation_pairs=6, validation_pool=20)


def runs(client, experiment="mosaic"):
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id]) if exp else []


@pytest.mark.usefixtures("prefect_harness")
def test_mosaic_train_logs_a_run_with_a_nested_run_per_stage_once(inputs, tmp_path):
    stage1, corpus = inputs
    uri = (tmp_path / "mlruns").as_uri()
    track, out = TrackingConfig(mlflow_uri=uri), str(tmp_path / "models")
    train_flow(stage1, corpus, config(), out, 1, track)
    client = MlflowClient(uri)
    (parent,) = [r for r in runs(client) if "mlflow.parentRunId" not in r.data.tags]
    children = {r.data.tags["mosaic.stage"]: r for r in runs(client) if "mlflow.parentRunId" in r.data.tags}
    assert set(children) == {"mlm", "joint", "contrastive"}  # the tiny base ships no MLM head: the warm-up first
    assert all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in children.values())
    assert parent.info.status == "FINISHED" and json.loads(parent.data.params["train.heldout_pairs"]) == 4
    joint = children["joint"]
    assert joint.data.params["stage.kind"] == "joint" and json.loads(joint.data.params["stage.alpha"]) == 0.3
    for key in ("loss/total", "loss/mlm", "loss/contrastive", "loss/mlm_frequency_baseline", "train/lr",
                "train/grad_norm", "speed/pairs_per_s", "speed/tokens_per_s"):
        assert [m.step for m in client.get_metric_history(joint.info.run_id, key)] == [1, 2, 3], key
    # the input model is scored (as step 0) after the last step
    assert sorted(m.step for m in client.get_metric_history(joint.info.run_id, "val/ndcg_at_10")) == [0, 3]
    assert "loss/mlm" not in children["contrastive"].data.metrics
    assert {a.path for a in client.list_artifacts(joint.info.run_id)} >= {"README.md", "stage.json",
                                                                         "train_log.jsonl"}

    train_flow(stage1, corpus, config(), out, 1, track)  # every stage from cache
    assert len(runs(client)) == 5  # a second train run, no second copy of its stages


@pytest.mark.usefixtures("prefect_harness")
def test_a_failed_mosaic_train_closes_its_run_as_failed(inputs, tmp_path):
    stage1, _ = inputs
    uri = (tmp_path / "mlruns").as_uri()
    broken = tmp_path / "pairs.jsonl"
    broken.write_text(json.dumps({"title": "no query or document column"}) + "\n")
    with pytest.raises(Exception, match="query"):
        train_flow(stage1, str(broken), config(), str(tmp_path / "models"), 1, TrackingConfig(mlflow_uri=uri))
    (run,) = runs(MlflowClient(uri))
    assert run.info.status == "FAILED"


def test_a_pipeline_run_holds_its_stages_evaluation_gate_report_and_model(inputs, tmp_path):
    stage1, _ = inputs
    uri = (tmp_path / "mlruns").as_uri()
    track = TrackingConfig(mlflow_uri=uri, experiment="pipelines")
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.html").write_text("<html>report</html>")
    published = tmp_path / "published"
    published.mkdir()
    (published / "model.safetensors").write_bytes(b"weights")
    run_id = tracking.start_run.fn(track, "run-1", {"config": {"base_model": "tiny", "train": {"seed": 0}}})
    stage_run = tracking.log_stage.fn(track, run_id, "stage1", stage1, {"tokens_added": 17})
    scores = {"base": [{"task": "heldout", "value": 0.5}], "contrastive": [{"task": "heldout", "value": 0.6}]}
    decision = {"check": {"passed": True}, "published": True, "message": "passes the gate",
                "published_path": str(published)}
    tracking.log_outcome.fn(track, run_id, scores, decision, {"html": str(report / "report.html")}, stage1,
                            {"tokens_added": 17, "funnel": {"training pairs": 20,
                                                                   "latest pairs (revisions, deletions applied)": 30}})
    tracking.end_run.fn(track, run_id)

    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.data.params["config.base_model"] == "tiny" and run.data.params["funnel.training pairs"] == "20"
    assert run.data.params["funnel.latest pairs _revisions_ deletions applied_"] == "30"  # the report's own names
    assert run.data.metrics["eval/contrastive/heldout"] == 0.6 and run.data.metrics["gate/passed"] == 1.0
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert artifacts >= {"evaluation.json", "gate_decision.json", "report", "model_card", "published_model"}
    assert [a.path for a in client.list_artifacts(run_id, "published_model")] == ["published_model/model.safetensors"]
    child = client.get_run(stage_run)
    assert child.data.tags["mlflow.parentRunId"] == run_id and child.data.params["tokens_added"] == "17"
    assert tracking.log_stage.fn(track, run_id, "stage1", stage1) == stage_run  # cached: not logged again


def test_a_lost_tracking_server_warns_and_logs_nothing(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    track = TrackingConfig(mlflow_uri="http://127.0.0.1:9")
    with caplog.at_level(logging.WARNING, logger="tasks.tracking"):
        run_id = tracking.start_run.fn(track, "run", {"a": 1})
        assert run_id is None
        assert tracking.log_stage.fn(track, run_id, "stage1", str(tmp_path)) is None
        tracking.end_run.fn(track, run_id)
    assert "MLflow: could not start a run" in caplog.text and "the run goes on without it" in caplog.text
