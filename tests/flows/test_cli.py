from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    "command", [[], ["ingest"], ["stats"], ["run"], ["filter"], ["vocab"], ["pairs"], ["pairs", "islamic"]]
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
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  stages:\n    - {name: joint, kind: jiont}\n")
    result = CliRunner().invoke(app, ["run", "--config", str(bad), "-d", str(tmp_path / "r")])
    assert result.exit_code == 2 and "invalid pipeline config" in result.output and "kind" in result.output
    assert not (tmp_path / "r").exists()  # validated before any work
