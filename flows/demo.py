"""The built-in demo: an invented biomedical sub-field generated into the data root
(:mod:`mosaic_core.data.demo`), then the whole pipeline on it."""

from __future__ import annotations

from prefect import flow

from flows.pipeline import mosaic_pipeline
from mosaic_core.config import PipelineConfig, TrackingConfig
from mosaic_core.data.demo import demo_pipeline
from storage.lock import root_lock
from tasks.demo import generate_demo


def demo_config(data_root: str, seed: int = 0) -> PipelineConfig:
    """Generate the demo of ``seed`` into ``data_root`` (idempotent) and return its pipeline config."""
    paths = generate_demo(data_root, seed)
    return demo_pipeline(paths["source"], paths["task"])


@flow(name="demo")
def demo_flow(data_root: str, seed: int = 0, tracking: TrackingConfig | None = None) -> dict:
    """``mosaic run`` without a config: the demo snapshot of ``seed``, ingested, filtered,
    expanded, trained, evaluated (held-out pairs and the invented-term task) and gated
    (tracked in MLflow too with ``tracking``)."""
    with root_lock(data_root, "demo flow"):
        cfg = demo_config(data_root, seed)
        return mosaic_pipeline(cfg.model_copy(update={"tracking": tracking}) if tracking else cfg, data_root)
