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
