"""A pipeline YAML file read into a :class:`PipelineConfig`: what ``mosaic run --config`` and the
rebuild deployment load, checked by the CLI before anything heavy is imported."""

from __future__ import annotations

from pathlib import Path

import yaml

from mosaic_core.config import PipelineConfig
from storage.own_pairs import locate


def load_pipeline_config(config_file: str) -> PipelineConfig:
    """The pipeline YAML at ``config_file``, validated; ``pairs.path`` is read relative to the
    file's folder (an absolute path, or a hub dataset, stays as it is)."""
    path = Path(config_file).expanduser().resolve()
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{config_file}: the top level must be a mapping of sections (base_model:, ingest:, "
                         f"train:, …), not a {type(data).__name__}; see docs/pipeline.example.yaml")
    pairs = data.get("pairs")
    if isinstance(pairs, dict) and isinstance(pairs.get("path"), str):
        data["pairs"] = {**pairs, "path": locate(pairs["path"], path.parent)}
    return PipelineConfig.load(data)
