"""Prefect task that brings a user's own pairs into a data root, as ingest brings PubMed's.

The pairs land where ingested citations do — ``citations/source=pairs-NNNNN/part.parquet``
partitions of ``partition_rows`` rows, one ingest manifest each, the catalog's
``latest_pairs`` — so the filter, stage 1, training, the held-out task, the report's funnel and
``mosaic stats`` read them as they read PubMed's. Cached on the source's content: an unchanged
source is not read again, and its partitions keep their checksums, so the filter reruns
nothing either.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from mosaic_core.config import OwnPairsConfig, PipelineConfig
from mosaic_core.data.own_pairs import CODE_VERSION, PairStats, pair_row
from mosaic_core.data.splits import pairs_needed
from storage import schemas
from storage.catalog import Catalog
from storage.layout import DataLayout
from storage.manifest import Manifest, is_current, write_manifest
from storage.own_pairs import check_own_pairs, content_hash, iter_pairs
from storage.pairs_io import CorpusError
from storage.parquet import write_partition
from tasks.keys import cache_key
from tasks.results import SERIALIZER, json_only, verified

log = logging.getLogger(__name__)
PREFIX = "pairs-"


@json_only
def _import_key(context: TaskRunContext, p: dict) -> str:
    cfg: OwnPairsConfig = p["cfg"]
    files = check_own_pairs(cfg.path, cfg.query_column, cfg.document_column)
    return cache_key("pairs", content_hash(files), cfg.config_hash(), CODE_VERSION, str(DataLayout(p["root"]).root))


def _row(index: int, partition: str, cfg: OwnPairsConfig, query: object, document: object,
         stats: PairStats) -> dict:
    q, d, reason, language = pair_row(query, document, cfg)
    stats.add(reason)
    return {"pmid": index, "version": 1, "file_seq": index // cfg.partition_rows,
            "record_index": index % cfg.partition_rows, "source_file": partition,
            "title": query if isinstance(query, str) else None, "detected_language": language,
            "query": q, "document": d, "drop_reason": reason}


def _write(layout: DataLayout, cfg: OwnPairsConfig, digest: str, number: int, rows: list[dict],
           stats: PairStats, started: datetime) -> Manifest:
    partition = f"{PREFIX}{number:05d}"
    path = layout.partition_path("citations", partition)
    write_partition(path, schemas.CITATIONS, [rows])
    write_partition(layout.partition_path("deletions", partition), schemas.DELETIONS, [])
    manifest = Manifest(stage="ingest", partition=partition, source=cfg.path, source_md5=digest, file_seq=number,
                        config_hash=cfg.config_hash(), code_version=CODE_VERSION, status="complete",
                        records_in=stats.rows, rows_out=len(rows), kept=stats.kept, dropped=dict(stats.dropped),
                        outputs=[str(path)], started_at=started)
    write_manifest(layout, manifest)
    return manifest


def _remove_beyond(layout: DataLayout, count: int) -> None:
    """Partitions an earlier, longer version of the source left: gone with their manifests."""
    for path in layout.dataset_dir("citations").glob(f"source={PREFIX}*"):
        number = int(path.name.removeprefix(f"source={PREFIX}"))
        if number >= count:
            for dataset in ("citations", "deletions"):
                layout.partition_path(dataset, path.name.removeprefix("source=")).unlink(missing_ok=True)
            layout.manifest_path("ingest", path.name.removeprefix("source=")).unlink(missing_ok=True)


def _import_output(p: dict) -> tuple[Path, bool]:
    cfg, layout = p["cfg"], DataLayout(p["root"])
    digest = content_hash(check_own_pairs(cfg.path, cfg.query_column, cfg.document_column))
    parts = [path.name.removeprefix("source=") for path in layout.dataset_dir("citations").glob(f"source={PREFIX}*")]
    return layout.results_dir, bool(parts) and all(
        is_current(layout, "ingest", part, digest, cfg.config_hash(), CODE_VERSION) for part in parts)


@verified(_import_output)
@task(name="import-pairs", cache_key_fn=_import_key, persist_result=True, result_serializer=SERIALIZER, retries=0)
def import_pairs(cfg: OwnPairsConfig, root: str) -> list[Manifest]:
    """Read ``cfg.path`` in batches and write its pairs, normalised and filtered, as partitions
    of ``root``; one manifest per partition. A source with no usable pair is a CorpusError with
    the counts per reason."""
    layout, started = DataLayout(root), datetime.now(timezone.utc)
    files = check_own_pairs(cfg.path, cfg.query_column, cfg.document_column)
    digest, unreadable = content_hash(files), {}
    manifests, rows, stats, total = [], [], PairStats(), PairStats()
    for batch in iter_pairs(files, cfg.query_column, cfg.document_column, unreadable):
        for query, document in batch:
            rows.append(_row(total.rows, f"{PREFIX}{len(manifests):05d}", cfg, query, document, stats))
            total.add(rows[-1]["drop_reason"])
            if len(rows) == cfg.partition_rows:
                manifests.append(_write(layout, cfg, digest, len(manifests), rows, stats, started))
                rows, stats = [], PairStats()
    if unreadable:
        log.warning("%s: %s rows could not be read", cfg.path, dict(unreadable))
        stats.dropped.update(unreadable)
        total.dropped.update(unreadable)
    if rows or unreadable or not manifests:
        manifests.append(_write(layout, cfg, digest, len(manifests), rows, stats, started))
    _remove_beyond(layout, len(manifests))
    if not total.kept:
        raise _none_left(cfg.path, total)
    log.info("%s: %d rows, %d pairs kept, dropped %s", cfg.path, total.rows, total.kept, _reasons(total))
    return manifests


def _reasons(stats: PairStats) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in stats.dropped.most_common()) or "none"


def _none_left(source: str, stats: PairStats) -> CorpusError:
    return CorpusError(f"{source}: no pairs left after the filters ({stats.rows:,} rows read; dropped: "
                       f"{_reasons(stats)}); check source.query_column / source.document_column and the "
                       "min_*_words thresholds")


def _too_few(source: str, distinct: int, rows: int, batch: int, heldout: int, validation: int) -> CorpusError | None:
    """The error of a run with ``distinct`` usable pairs (of ``rows``), None if they are enough."""
    need = pairs_needed(batch, heldout, validation)
    if distinct >= need:
        return None
    copies = f" ({rows - distinct:,} rows repeat another)" if rows > distinct else ""
    return CorpusError(f"{source}: {distinct:,} distinct usable pairs{copies}; a run needs at least {need:,}: "
                       f"{min(heldout, need // 5)} held out for the test, the validation pairs, and one training "
                       f"batch of {batch}. Add pairs, or lower train batch_size / heldout_pairs / validation_pairs")


def check_pairs_at_hand(own: OwnPairsConfig, cfg: PipelineConfig) -> None:
    """A :class:`CorpusError` when the pairs ``own`` names hold fewer distinct usable pairs
    (normalised and filtered as the import does) than the run ``cfg`` needs: read only until it has
    seen enough, so the CLI says so in a second, before anything is written or started."""
    batch = cfg.largest_batch
    need = pairs_needed(batch, cfg.train.heldout_pairs, cfg.train.validation_pairs)
    seen, stats, unreadable = set(), PairStats(), {}
    for chunk in iter_pairs(check_own_pairs(own.path, own.query_column, own.document_column), own.query_column,
                            own.document_column, unreadable):
        for query, document in chunk:
            q, d, reason, _ = pair_row(query, document, own)
            stats.add(reason)
            if reason is None:
                seen.add((q, d))
                if len(seen) >= need:
                    return
    stats.dropped.update(unreadable)
    if not seen:
        raise _none_left(own.path, stats)
    raise _too_few(own.path, len(seen), stats.kept, batch, cfg.train.heldout_pairs, cfg.train.validation_pairs)


@task(name="enough-pairs", cache_policy=NO_CACHE)
def check_enough_pairs(root: str, source: str, batch: int, heldout: int, validation: int) -> int:
    """The distinct usable pairs under ``root`` (read from ``source``); a :class:`CorpusError`
    before any model is loaded when they are fewer than a run needs (:func:`pairs_needed`)."""
    with Catalog(DataLayout(root)) as cat:
        rows, distinct = cat.rows("SELECT count(*), count(DISTINCT (query, document)) FROM latest_pairs")[0]
    if (error := _too_few(source, distinct, rows, batch, heldout, validation)) is not None:
        raise error
    return distinct
