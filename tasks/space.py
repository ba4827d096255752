"""How much disk a run needs, checked before it starts: the models it writes (stage 1, each
stage, the control's, the published copy), each about the size of the base model's weights,
less what the data root's models already take (a rerun reuses them). A run that would not fit
is refused in one line (:class:`storage.space.NoSpace`) instead of failing halfway; the data
files (pairs, filtered partitions, examples) are small beside the models and are left to the
full-disk message (:mod:`storage.space`)."""

from __future__ import annotations

import logging
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from mosaic_core.config import PipelineConfig
from mosaic_core.modeling.refs import ModelNotFound, resolve_model
from storage.layout import DataLayout
from storage.space import check_space

log = logging.getLogger(__name__)
MARGIN = 1.2
"""The estimate's headroom: tokenizers, cards, reports, logs, a checkpoint's temporary copy."""


def folder_bytes(folder: Path, skip: str | None = None) -> int:
    """Bytes of the files under ``folder`` (a linked file counted as its target: a hub cache's
    snapshot), leaving out those whose name matches the glob ``skip``."""
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not (skip and p.match(skip)))


def models_written(cfg: PipelineConfig) -> int:
    """Model folders a run writes: stage 1, each stage (a warm-up the base may need counted: the
    estimate does not load the model to ask; a glossary's dictionary stage), the control's stages,
    the published copy."""
    control = len(cfg.train.control().stages) if cfg.trains_control else 0
    dictionary = 1 if cfg.glossary is not None and cfg.glossary.dictionary.epochs else 0
    return 1 + len(cfg.train.with_warmup(input_has_head=False).stages) + dictionary + control + 1


def disk_need(cfg: PipelineConfig, data_root: str) -> int | None:
    """Bytes the run still needs under ``data_root`` (None: the base model's size is unknown here)."""
    try:
        base = Path(resolve_model(cfg.base_model))
    except (ModelNotFound, OSError, ValueError):
        return None
    weights = folder_bytes(base)
    have = folder_bytes(DataLayout(data_root).models_dir, skip="*.arrow")  # models, not the examples files
    return max(0, int(MARGIN * weights * models_written(cfg)) - have)


@task(name="disk-space", cache_policy=NO_CACHE)
def check_disk(cfg: PipelineConfig, data_root: str) -> int | None:
    """Refuse a run whose models would not fit the data root's disk; returns the need in bytes."""
    need = disk_need(cfg, data_root)
    if need is not None:
        check_space(Path(data_root), need)
        log.info("disk: the run needs about %d MiB more under %s", need // 2**20, data_root)
    return need
