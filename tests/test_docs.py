"""The documentation's generated reference (docs/gen_reference.py, a MkDocs hook): every `mosaic`
command, option and PipelineConfig field has help text, the generated pages name them all, and
the committed configuration reference is the one the models generate now."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gen():
    return load_script(ROOT / "docs" / "gen_reference.py")


def test_every_command_option_and_field_has_help(gen):
    missing = gen.missing_help()
    assert not missing, ("no help text (add help=… to the option, description=… to the field):\n"
                         + "\n".join(missing))


def test_cli_page_names_every_command_and_option(gen):
    page = gen.cli_markdown()
    commands = list(gen.walk_commands())
    assert len(commands) > 10
    for path, command in commands:
        if path != "mosaic":
            assert f"`{path}`" in page
        for param in command.params:
            if not param.hidden:
                assert gen._param_names(param) in page, (path, param.name)


def test_config_page_names_every_section_and_field(gen):
    from mosaic_core.config import PipelineConfig

    page = gen.config_markdown()
    sections = dict(gen.walk_sections())
    assert sections[""] is PipelineConfig and "train.stages[]" in sections and "vocab.distill" in sections
    for path, model in sections.items():
        assert f"## {path or 'top level'}\n" in page
        for name in model.model_fields:
            assert f"| `{name}` |" in page, (path, name)


def test_missing_help_is_reported(gen, monkeypatch):
    """The check itself works: a field without a description is named."""
    from mosaic_core.config import PairConfig

    monkeypatch.setattr(PairConfig.model_fields["min_title_words"], "description", None)
    assert "config field `source kind: pubmed.pairs.min_title_words` (PairConfig)" in gen.missing_help()


def test_the_committed_configuration_reference_is_current(gen):
    assert gen.CONFIG_FILE.read_text() == gen.config_markdown(), (
        "docs/reference/config.md is not what the config models generate: run `python docs/gen_reference.py`")
