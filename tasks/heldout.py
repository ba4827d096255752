"""The held-out split of a data root: recorded at its first run, kept by every later one
(:mod:`mosaic_core.trainer.heldout`, :mod:`storage.heldout`)."""

from __future__ import annotations

import logging

from prefect import task
from prefect.cache_policies import NO_CACHE

from mosaic_core.trainer.heldout import Kept, Threshold, held_out_change, pair_hashes, split_by_hash
from storage.heldout import last_test_set, record_split, recorded_thresholds
from storage.pairs_io import pair_batches

log = logging.getLogger(__name__)


def recorded_split(pairs_source: str, n_test: int, n_validation: int) -> Kept:
    """The thresholds the data root of ``pairs_source`` recorded for these numbers of test and
    validation pairs (none for a pairs file, or a root no run has split yet)."""
    test, validation = recorded_thresholds(pairs_source, n_test, n_validation)
    return Kept(Threshold(*test) if test else None, Threshold(*validation) if validation else None)


@task(name="hold-out", cache_policy=NO_CACHE)
def hold_out(data_root: str, n_test: int, n_validation: int) -> dict:
    """Split ``data_root``'s pairs as training will (one streamed pass of content hashes: 8 bytes
    a pair), record the split's thresholds where none are yet (the root's first run: exactly
    the first ``n_test`` and next ``n_validation`` by hash) and its test pairs; returns the sizes
    and how the test set changed since the root's last run (:func:`held_out_change`, ``since``:
    when that run recorded its test pairs). The caller holds the root's writer lock."""
    hashes = pair_hashes(pair_batches(data_root))
    split = split_by_hash(hashes, n_test, n_validation, recorded_split(data_root, n_test, n_validation))
    previous = last_test_set(data_root, n_test)
    change = held_out_change(previous[0] if previous else None, hashes[split.test])
    record_split(data_root, n_test, n_validation, (split.ends.test.hash, split.ends.test.ties),
                 (split.ends.validation.hash, split.ends.validation.ties), hashes[split.test])
    log.info("held out %d test and %d validation pairs of %d%s", len(split.test), len(split.validation), len(hashes),
             f" (test: {change['added']} added, {change['gone']} gone since {previous[1]})" if previous else "")
    return {**change, "validation": len(split.validation), "since": previous[1] if previous else None}
