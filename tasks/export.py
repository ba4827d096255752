"""Prefect task: the fast exports of the published model (``export:`` in the pipeline config),
beside ``models/current`` in ``models/exports/<kind>/``, never replacing it."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from mosaic_core.export import MANIFEST, ExportRefused, export_model
from mosaic_core.trainer.heldout import heldout_split
from storage.layout import DataLayout
from storage.lock import root_lock
from storage.pairs_io import pair_batches
from storage.published import current_model
from tasks.heldout import recorded_split

log = logging.getLogger(__name__)
CHECK_PAIRS = 200
"""Held-out pairs an export's retrieval check scores (NDCG@10 against the PyTorch model)."""


def exports_dir(data_root: str) -> Path:
    """``ROOT/models/exports``: one folder per export kind of the published model."""
    return DataLayout(data_root).models_dir / "exports"


@task(name="export-published", cache_policy=NO_CACHE)
def export_published(data_root: str, kinds: list[str], heldout_pairs: int, query_column: str = "query",
                     document_column: str = "document") -> list[dict]:
    """Export the model published now as each of ``kinds`` (under the root's writer lock); an
    export already made from the same published copy is kept. A refused export (verification
    failed) is a WARN: recorded in the result, the others still run; a missing ``export`` extra
    raises. Returns one record per kind: kind, status (written, kept, refused, skipped), path,
    and the export's numbers or why it was refused."""
    with root_lock(data_root, "mosaic_pipeline export"):
        published = current_model(DataLayout(data_root))
        if published is None:
            log.warning("export: no model is published under %s; nothing exported", data_root)
            return [{"kind": k, "status": "skipped", "path": None, "message": "no published model"} for k in kinds]
        target_dir = exports_dir(data_root)
        for stale in target_dir.glob(".*.tmp") if target_dir.is_dir() else ():  # left by a killed export
            shutil.rmtree(stale, ignore_errors=True)
        heldout = heldout_split(lambda: pair_batches(data_root, query_column, document_column), heldout_pairs,
                                0, kept=recorded_split(data_root, heldout_pairs, 0))[0][:CHECK_PAIRS]
        records = []
        for kind in kinds:
            out = target_dir / kind
            if _made_from(out) == str(published):
                records.append({"kind": kind, "status": "kept", "path": str(out), "message": "already exported"})
                continue
            try:
                result = export_model(str(published), kind, out, pairs=heldout)
            except ExportRefused as exc:
                log.warning("export %s: %s", kind, exc)
                records.append({"kind": kind, "status": "refused", "path": None, "message": str(exc)})
                continue
            records.append({"kind": kind, "status": "written", "path": str(out), "metrics": result.metrics})
        return records


def _made_from(folder: Path) -> str | None:
    """The source an earlier export in ``folder`` was made from, if any."""
    try:
        return json.loads((folder / MANIFEST).read_text()).get("source")
    except (OSError, ValueError):
        return None
