"""Prefect tasks of the scheduled rebuild: what changed in the snapshot source since the last
successful rebuild, and recording what a successful rebuild saw."""

from __future__ import annotations

import logging

from prefect import task
from prefect.cache_policies import NO_CACHE

from storage.layout import DataLayout
from storage.snapshot_state import read_snapshot_state, snapshot_signature, write_snapshot_state
from storage.sources import SourceFile

log = logging.getLogger(__name__)


@task(name="snapshot-changes", cache_policy=NO_CACHE)
def snapshot_changes(files: list[SourceFile], root: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """({"new": [...], "changed": [...], "removed": [...]} partitions against the last rebuild
    (everything is new before the first), the listing's signature to record after success)."""
    now, before = snapshot_signature(files), read_snapshot_state(DataLayout(root)) or {}
    changes = {"new": sorted(set(now) - set(before)),
               "changed": sorted(p for p in set(now) & set(before) if now[p] != before[p]),
               "removed": sorted(set(before) - set(now))}
    log.info("snapshot: %d files; %d new, %d changed, %d removed since the last rebuild", len(files),
             *(len(v) for v in changes.values()))
    return changes, now


@task(name="record-snapshot", cache_policy=NO_CACHE)
def record_snapshot(signature: dict[str, str], root: str) -> None:
    """Record what the rebuild saw when it listed the source (not a later look: a local file
    edited during the run must count as changed next time)."""
    write_snapshot_state(DataLayout(root), signature)
