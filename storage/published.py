"""The published model and the publish decisions of every run.

* ``DATA_ROOT/models/published/<run_id>/``: an immutable copy of each model ever published
  (the directory a run trains into is overwritten by the next rebuild; a published model never is);
* ``DATA_ROOT/models/current``: a symbolic link to the published copy in use, switched
  atomically (a new link under a temporary name, renamed over the old one);
* ``DATA_ROOT/decisions/<run_id>.json``: one record per decision (published or not, why, the
  scores it was taken on, the previous model), read by the catalog's ``publish_decisions`` and
  ``published_models`` views and by ``mosaic history``.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

from storage.layout import DataLayout
from storage.parquet import write_atomic_bytes

KEEP_PUBLISHED = 3
"""Published copies kept besides the current one (for a quick rollback with ``mosaic publish``)."""


class PublishError(RuntimeError):
    """A model cannot be published as asked; the message says why and what to do."""


def current_model(layout: DataLayout) -> Path | None:
    """The published model directory in use, or ``None`` before the first publication."""
    link = layout.current_model_path
    return link.resolve() if link.is_symlink() and link.resolve().is_dir() else None


def write_decision(layout: DataLayout, record: dict) -> Path:
    """Record one run's decision (``record`` holds ``run_id``); returns its path."""
    path = layout.decisions_dir / f"{record['run_id']}.json"
    write_atomic_bytes(path, json.dumps({"decided_at": datetime.now(timezone.utc).isoformat(), **record},
                                        indent=2).encode())
    return path


def read_decision(layout: DataLayout, run_id: str) -> dict:
    path = layout.decisions_dir / f"{run_id}.json"
    if not path.is_file():
        known = sorted(p.stem for p in layout.decisions_dir.glob("*.json"))
        raise PublishError(f"no decision recorded for run {run_id!r} in {layout.root}; known runs: "
                           f"{', '.join(known[-5:]) or 'none'} (see `mosaic history`)")
    return json.loads(path.read_text())


def publish_model(layout: DataLayout, model_dir: Path, run_id: str) -> Path:
    """Copy ``model_dir`` to ``models/published/<run_id>`` and point ``models/current`` at it;
    returns the published copy. Older copies beyond :data:`KEEP_PUBLISHED` are removed."""
    target = layout.published_models_dir / run_id
    tmp = target.with_name(f".{run_id}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(model_dir, tmp, ignore=shutil.ignore_patterns("checkpoints", ".*"))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    link = layout.current_model_path
    new_link = link.with_name(f".{link.name}.tmp")
    new_link.unlink(missing_ok=True)
    os.symlink(target, new_link, target_is_directory=True)
    os.replace(new_link, link)
    copies = sorted((p for p in layout.published_models_dir.iterdir() if p.is_dir() and not p.name.startswith(".")),
                    key=lambda p: p.stat().st_mtime)
    for old in copies[:-(KEEP_PUBLISHED + 1)]:
        if old != target:
            shutil.rmtree(old, ignore_errors=True)
    return target
