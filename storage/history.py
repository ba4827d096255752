"""Evaluation history: one JSON file per evaluation run under ``DATA_ROOT/evaluations/``,
read by the catalog's ``eval_history`` view so scheduled rebuilds compare over time."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from storage.layout import DataLayout
from storage.parquet import write_atomic_bytes


def record_evaluation(layout: DataLayout, run_id: str, records: list[dict], name: str | None = None) -> None:
    """Write ``records`` ({model, model_fingerprint, task, task_checksum, metric, value}) of run
    ``run_id`` to ``evaluations/NAME.json`` (``name``: one evaluation of a run that evaluates more
    than once; default ``run_id``)."""
    at = datetime.now(timezone.utc).isoformat()
    rows = [{"run_id": run_id, "evaluated_at": at, **r} for r in records]
    write_atomic_bytes(layout.evaluations_dir / f"{name or run_id}.json", json.dumps(rows).encode())
