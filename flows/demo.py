"""The demo source: an invented biomedical sub-field generated into the data root
(:mod:`mosaic_core.data.demo`) as a small PubMed snapshot, ingested and filtered like one; and
``mosaic run`` without a config, the whole pipeline on it."""

from __future__ import annotations

from prefect import flow

from flows.ingest import pubmed_pairs
from flows.pipeline import mosaic_pipeline
from mosaic_core.config import DemoSource, IngestConfig, PipelineConfig, TrackingConfig
from mosaic_core.data.demo import demo_pipeline
from storage.lock import root_lock
from storage.manifest import Manifest
from storage.sources import SourceFile
from tasks.demo import generate_demo
from tasks.ingest import list_snapshot


def demo_config(data_root: str, seed: int = 0) -> PipelineConfig:
    """Generate the demo of ``seed`` into ``data_root`` (idempotent) and return its pipeline config."""
    paths = generate_demo(data_root, seed)
    return demo_pipeline(seed, paths["task"], paths["glossary"])


def _snapshot(source: DemoSource, data_root: str) -> IngestConfig:
    return IngestConfig(source=generate_demo(data_root, source.seed)["source"])


def demo_pairs(source: DemoSource, cfg: PipelineConfig, data_root: str) -> tuple[list[Manifest], list[Manifest]]:
    """(ingest manifests, filter manifests) of the demo of ``source.seed``, generated into ``data_root``."""
    return pubmed_pairs(_snapshot(source, data_root), cfg, data_root)


def snapshot_files(source: DemoSource, data_root: str) -> list[SourceFile]:
    """The generated snapshot's files: the same on every rebuild once generated."""
    return list_snapshot(_snapshot(source, data_root))


@flow(name="demo")
def demo_flow(data_root: str, seed: int = 0, tracking: TrackingConfig | None = None,
              sets: dict[str, object] | None = None, full: bool = False) -> dict:
    """``mosaic run`` without a config: the demo snapshot of ``seed``, ingested, filtered,
    expanded, trained, evaluated (held-out pairs and the invented-term task) and gated
    (tracked in MLflow too with ``tracking``; ``sets``: dotted fields of its config replaced,
    as ``mosaic run --set`` gives them; ``full``: a full rebuild, never an update tick)."""
    with root_lock(data_root, "demo flow"):
        cfg = demo_config(data_root, seed)
        cfg = cfg.overridden(sets) if sets else cfg
        return mosaic_pipeline(cfg.model_copy(update={"tracking": tracking}) if tracking else cfg, data_root, full)
