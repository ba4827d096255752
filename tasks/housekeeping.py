"""Prefect task that clears what a killed run left behind in a data root."""

from __future__ import annotations

import logging

from prefect import task
from prefect.cache_policies import NO_CACHE

from storage.layout import DataLayout
from storage.parquet import remove_stale_temporaries

log = logging.getLogger(__name__)


@task(name="remove-stale-temporaries", cache_policy=NO_CACHE)
def remove_stale(root: str, stage: str) -> int:
    """Remove the unfinished files an interrupted run of ``stage`` left in its own directories
    of ``root`` (a ``kill -9`` cannot clean up after itself); returns how many."""
    removed = remove_stale_temporaries(DataLayout(root).stage_dirs(stage))
    if removed:
        log.warning("%s: removed %d unfinished file(s) an interrupted run left in %s", stage, removed, root)
    return removed
