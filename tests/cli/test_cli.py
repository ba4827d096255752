from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    "command", [[], ["ingest"], ["stats"], ["run"], ["filter"], ["vocab"], ["pairs"], ["pairs", "islamic"],
                ["train"], ["eval"], ["history"], ["publish"], ["diagnose"], ["probe"]]
)
def test_help_on_every_subcommand(command):
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_ingest_help_explains_sources():
    out = runner.invoke(app, ["ingest", "--help"]).output
    assert "--source" in out and "updatefiles" in out and "--data-root" in out


def test_stats_on_missing_root_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["stats", "--data-root", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "mosaic ingest" in result.output


def test_example_pipeline_config_validates_and_bad_config_is_a_clear_error(tmp_path):
    import yaml

    from mosaic_core.config import PipelineConfig

    root = Path(__file__).resolve().parents[2]
    cfg = PipelineConfig.load(yaml.safe_load((root / "docs" / "pipeline.example.yaml").read_text()))
    assert [s.name for s in cfg.train.stages] == ["joint", "contrastive"] and cfg.vocab.base_model == cfg.base_model
    assert cfg.trains_control and not [t.inputs() for t in cfg.eval_tasks if t.inputs()]  # runnable as shipped
    multistage = PipelineConfig.load(yaml.safe_load((root / "docs" / "multistage.example.yaml").read_text()))
    general, joint, _ = multistage.train.stages
    assert general.pairs and multistage.train.columns_for(general) == ("query", "positive")
    assert multistage.train.columns_for(joint) == ("query", "document")  # the run's pairs and columns
    sparse = PipelineConfig.load(yaml.safe_load((root / "docs" / "sparse.example.yaml").read_text()))
    assert sparse.vocab.model_kind == "sparse" and {s.model_kind for s in sparse.train.stages} == {"sparse"}
    dense_stage = {"base_model": "m", "model_kind": "sparse", "vocab": {"model_kind": "dense"}}
    with pytest.raises(ValueError, match="set model_kind only"):
        PipelineConfig.model_validate(dense_stage)
    islamic = PipelineConfig.load(yaml.safe_load((root / "docs" / "islamic.example.yaml").read_text()))
    assert islamic.source.threshold == 0.5 and islamic.gate_tasks() == ["heldout", "verses"]
    assert [t.kind for t in islamic.eval_specs("/data")] == ["heldout", "verses"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  stages:\n    - {name: joint, kind: jiont}\n")
    result = CliRunner().invoke(app, ["run", "--config", str(bad), "-d", str(tmp_path / "r")])
    assert result.exit_code == 2 and "invalid pipeline config" in result.output and "kind" in result.output
    assert not (tmp_path / "r").exists()  # validated before any work


@pytest.mark.usefixtures("prefect_harness")
def test_diagnose_and_probe_commands(tmp_path):
    import json

    from builders import tiny_bert

    model = str(tiny_bert(tmp_path / "m", mlm_head=True))
    result = runner.invoke(app, ["diagnose", "patient", "--model", model, "--text", "The patient was in a cell.",
                                 "--json"])
    assert result.exit_code == 0, result.output
    diagnosis = json.loads(result.stdout)
    assert diagnosis["single_token"] and len(diagnosis["occurrences"]) == 1 and diagnosis["median_rank"] >= 1
    result = runner.invoke(app, ["probe", "--model", f"tiny={model}", "--out", str(tmp_path / "probe"),
                                 "--word", "zentrolase"])
    assert result.exit_code == 0, result.output
    assert "zentrolase" in result.output and "tiny" in result.output
    assert (tmp_path / "probe" / "adaptation_pairs.jsonl").read_text().count("zentrolase") >= 24
    scores = json.loads((tmp_path / "probe" / "report" / "results.json").read_text())
    assert 0 <= scores["scores"]["tiny"][0]["value"] <= 1
    bad = runner.invoke(app, ["probe", "--model", model, "--out", str(tmp_path / "p2"), "--word", "x-1"])
    assert bad.exit_code == 2 and "letters only" in bad.output


def test_one_rebuild_schedule_for_serve_and_the_work_pool():
    from deployments import DEFAULT_CRON

    assert DEFAULT_CRON in runner.invoke(app, ["serve", "--help"]).output
    assert DEFAULT_CRON in runner.invoke(app, ["deploy", "--help"]).output


def test_filter_backend_reaches_the_filter_config(tmp_path, monkeypatch):
    import cli.data

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"query": "q", "document": "d"}\n')
    seen = []

    def run(flow, source, cfg, root, **kw):
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(cli.data, "_run", run)
    args = ["filter", "--input", str(pairs), "--data-root", str(tmp_path / "root"), "--model",
            "offline:all-MiniLM-L6-v2"]
    runner.invoke(app, [*args, "--backend", "onnx-int8"])
    assert seen[-1].backend == "onnx-int8"
    runner.invoke(app, args)
    assert seen[-1].backend == "torch"
    result = runner.invoke(app, [*args, "--backend", "tflite"])
    assert result.exit_code != 0 and "backend" in result.output


def test_vocab_set_reaches_any_stage_one_field():
    import typer

    from cli.vocab import _vocab_config

    cfg = _vocab_config({"distill.batch_size": 16, "min_count": 7}, base_model="b", min_count=50)
    assert (cfg.distill.batch_size, cfg.min_count, cfg.base_model) == (16, 7, "b")  # --set after the options
    with pytest.raises(typer.BadParameter, match="distill.nope"):
        _vocab_config({"distill.nope": 1}, base_model="b")


def test_train_set_reaches_the_run_fields_as_well_as_the_stages(tmp_path, monkeypatch):
    import cli.train

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"query": "q", "document": "d"}\n')
    seen = []

    def run(flow, model, source, cfg, out, *a, **kw):
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(cli.train, "_run", run)
    args = ["train", "--model", "offline:all-MiniLM-L6-v2", "--pairs", str(pairs), "--out", str(tmp_path / "out")]
    runner.invoke(app, [*args, "--set", "mlm_warmup=off", "--set", "negative_rule.margin=0.95",
                        "--set", "joint.max_steps=7", "--set", "lr=3e-5"])
    cfg = seen[-1]
    assert (cfg.mlm_warmup, cfg.negative_rule.margin) == ("off", 0.95)
    assert [(s.name, s.max_steps, s.lr) for s in cfg.stages] == [("joint", 7, 3e-5), ("contrastive", 80, 3e-5)]
    runner.invoke(app, args)
    assert seen[-1].mlm_warmup == "auto"
    result = runner.invoke(app, [*args, "--set", "mlm_warmup=sometimes"])
    assert result.exit_code == 2 and "mlm_warmup" in result.output
