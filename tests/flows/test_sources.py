"""A data source is one type: a kind defined in one place (here, as docs/architecture.md says a
new contributor would) reaches the config, the pipeline, the run report, the scheduled rebuild,
the CLI's early checks and the configuration reference without any other edit."""

import json
import sys
from typing import ClassVar, Literal

import pytest
import yaml
from builders import tiny_bert, tiny_pipeline_yaml
from pydantic import Field

from mosaic_core.config import OwnPairsSource, PipelineConfig, Source
from storage.pairs_io import CorpusError


def toy_pairs(source, cfg, data_root):
    """The toy's flow: writes its pairs as a JSONL file and brings them in as own pairs would."""
    from flows.own_pairs import own_pairs

    path = f"{data_root}/toy.jsonl"
    with open(path, "w") as out:
        for i in range(source.rows):
            out.write(json.dumps({"query": f"toy question {i} about widget {i % 7}",
                                  "document": f"widget {i % 7} answer {i}: it turns, it hums, it lasts {i} years"})
                      + "\n")
    return own_pairs(OwnPairsSource(path=path), cfg, data_root)


def toy_check(source, cfg):
    if source.rows < 10:
        raise CorpusError(f"the toy source makes {source.rows} rows: ask for 10 or more")


@pytest.fixture
def toy_kind():
    class ToySource(Source):
        """Made-up pairs about widgets."""

        kind: Literal["toy"] = Field("toy", description="Made-up widget pairs.")
        rows: int = Field(40, description="How many pairs the toy makes.")
        flow: ClassVar[str] = f"{__name__}:toy_pairs"
        check: ClassVar[str | None] = f"{__name__}:toy_check"
        funnel_words: ClassVar[tuple[str, str, str, str]] = ("toy rows made", "batch", "toy pairs kept",
                                                              "toy pairs to filter")
        heldout_description: ClassVar[str] = "finding a held-out widget's answer from its question"

    yield ToySource
    Source._kinds.pop("toy")


def test_a_new_kind_loads_from_yaml_and_dumps_back(toy_kind):
    cfg = PipelineConfig.load(yaml.safe_load("source:\n  kind: toy\n  rows: 12\n"))
    assert isinstance(cfg.source, toy_kind) and cfg.source.rows == 12
    assert PipelineConfig.model_validate(cfg.model_dump(mode="json")) == cfg
    assert cfg.eval_specs(".")[0].description == "finding a held-out widget's answer from its question"
    with pytest.raises(ValueError, match="rows"):
        PipelineConfig.load({"source": {"kind": "toy", "rows": "many"}})


def test_the_reference_lists_every_kind_with_its_fields(toy_kind):
    from docs.gen_reference import config_markdown, missing_help

    page = config_markdown()
    for kind in ("pubmed", "pairs", "islamic", "demo", "documents", "toy"):
        assert f"## source kind: {kind}" in page
    assert "How many pairs the toy makes." in page and not missing_help()


def test_an_old_section_is_read_as_its_source_with_a_warning():
    with pytest.warns(FutureWarning, match="source: {kind: pairs"):
        cfg = PipelineConfig.load({"pairs": {"path": "p.jsonl", "query_column": "q"}})
    assert cfg.source.kind == "pairs" and cfg.source.query_column == "q"
    with pytest.raises(ValueError, match="give one source"):
        PipelineConfig.load({"pairs": {"path": "p.jsonl"}, "islamic": {"quran": "q", "tafsir": "t"}})
    with pytest.raises(ValueError, match="unknown: choose among demo, documents, islamic, pairs, pubmed"):
        PipelineConfig.load({"source": {"kind": "pubmed-typo"}})


def test_a_source_keeps_the_cache_keys_of_its_old_section():
    from mosaic_core.config import OwnPairsConfig

    assert OwnPairsSource(path="p.jsonl").config_hash() == OwnPairsConfig(path="p.jsonl").config_hash()


def test_the_cli_runs_a_new_kinds_check_before_any_server_starts(toy_kind, tmp_path, monkeypatch, capsys):
    import flows.server
    from cli.common import main

    started = []
    monkeypatch.setattr(flows.server._Temporary, "start", lambda self: started.append(True))
    config = tmp_path / "toy.yaml"
    base = str(tiny_bert(tmp_path / "base"))
    config.write_text(yaml.safe_dump({"base_model": base, "filter": {"model": base},
                                      "source": {"kind": "toy", "rows": 3}}))
    monkeypatch.setattr(sys, "argv", ["mosaic", "run", "--config", str(config), "-d", str(tmp_path / "root")])
    with pytest.raises(SystemExit) as end:
        main()
    assert end.value.code == 2 and not started
    assert "the toy source makes 3 rows: ask for 10 or more" in capsys.readouterr().err


@pytest.mark.usefixtures("prefect_harness")
def test_a_new_kind_runs_the_pipeline_and_its_words_reach_the_report(toy_kind, tmp_path):
    from flows.rebuild import rebuild

    base = str(tiny_bert(tmp_path / "base"))
    config = tiny_pipeline_yaml(tmp_path / "pipeline.yaml", "", base)
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "source": {"kind": "toy", "rows": 48}}))
    result = rebuild(str(config), str(tmp_path / "root"))  # no watch: a rebuild always runs
    assert result["rebuilt"] and result["pairs"] == 48
    report = (tmp_path / "root" / "report" / "report.md").read_text()
    assert "toy rows made" in report and "toy pairs kept" in report and "citations parsed" not in report
    assert "finding a held-out widget's answer from its question" in report
