"""A pipeline YAML file read into a :class:`PipelineConfig`: what ``mosaic run --config`` and the
rebuild deployment load, checked by the CLI before anything heavy is imported."""

from __future__ import annotations

from pathlib import Path

import yaml

from mosaic_core.config import PipelineConfig
from mosaic_core.config_sources import Source, translate
from storage.own_pairs import locate
from storage.sources import is_remote


def load_pipeline_config(config_file: str) -> PipelineConfig:
    """The pipeline YAML at ``config_file``, validated; a source's paths (``source.path`` of own
    pairs) and the glossary's are read relative to the file's folder (an absolute path, a URL or a
    hub dataset stays as it is)."""
    path = Path(config_file).expanduser().resolve()
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{config_file}: the top level must be a mapping of sections (base_model:, source:, "
                         f"train:, …), not a {type(data).__name__}; see docs/pipeline.example.yaml")
    data = translate(data)
    if isinstance(data.get("source"), dict):
        data["source"] = located(data["source"], path.parent)
    glossary = data.get("glossary")
    if isinstance(glossary, dict) and isinstance(glossary.get("path"), str) and not is_remote(glossary["path"]):
        data["glossary"] = {**glossary, "path": str((path.parent / Path(glossary["path"]).expanduser()).resolve())}
    return PipelineConfig.load(data)


def located(section: dict, base: Path) -> dict:
    """A ``source:`` section with its relative paths (``Source.relative_paths``) taken from
    ``base``: the config file's folder, or the working directory for ``mosaic run --pairs``."""
    kind = Source.kinds().get(section.get("kind", "pubmed"))
    if kind is None:  # an unknown kind: validation says so
        return section
    return {**section, **{k: locate(section[k], base, text=kind.text_files) for k in kind.relative_paths
                          if isinstance(section.get(k), str)}}
