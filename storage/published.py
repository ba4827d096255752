"""The published model and the publish decisions of every run.

* ``DATA_ROOT/models/published/<run_id>/``: an immutable copy of each model ever published
  (the directory a run trains into is overwritten by the next rebuild; a published model never is);
* ``DATA_ROOT/models/current``: a relative symbolic link (``published/<run_id>``) to the published
  copy in use, so that the root stays valid wherever it is moved or mounted; switched atomically
  (a new link under a temporary name, renamed over the old one), and only to a copy that passed
  the loadability check it was published with;
* ``DATA_ROOT/decisions/<run_id>.json``: one record per decision (published or not, why, the
  scores it was taken on, the previous model), read by the catalog's ``publish_decisions`` and
  ``published_models`` views and by ``mosaic history``. Its paths are absolute, as of the root
  the decision was taken in (``data_root``, recorded since links are relative): read them back
  with :func:`published_copy` and :func:`recorded_path`, which find them under a moved root.

Published files get the modes any file written here gets (0o666 / 0o777 less the umask): a
copy keeps its source's modes, and safetensors writes weights through a 0600 temporary file.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from storage.layout import DataLayout
from storage.parquet import write_atomic_bytes

KEEP_PUBLISHED = 3
"""Published copies kept besides the current one (for a quick rollback with ``mosaic publish``)."""


class PublishError(RuntimeError):
    """A model cannot be published as asked; the message says why and what to do."""


def current_model(layout: DataLayout) -> Path | None:
    """The published model directory in use, or ``None`` before the first publication. A link
    written before links were relative (absolute, into a root since moved) is followed to the
    copy of the same name under this root."""
    link = layout.current_model_path
    if not link.is_symlink():
        return None
    target = link.resolve()
    if target.is_dir():
        return target
    moved = layout.published_models_dir / Path(os.readlink(link)).name
    return moved.resolve() if moved.is_dir() else None


def published_copy(layout: DataLayout, recorded: str | None) -> Path | None:
    """The published copy a decision record names (its ``published_path`` or ``previous``), or
    ``None`` if it is gone: the copy of that name under this root's ``models/published/`` (the
    root may have moved since the record was written), else the recorded path itself."""
    if not recorded:
        return None
    here = layout.published_models_dir / Path(recorded).name
    if here.is_dir():
        return here
    return Path(recorded) if Path(recorded).is_dir() else None


def recorded_path(layout: DataLayout, record: dict, recorded: str) -> Path:
    """A path a decision ``record`` holds (its ``candidate``), under this root if it was under the
    root the decision was taken in (``data_root``; older records lack it: the path as recorded)."""
    path, then = Path(recorded), record.get("data_root")
    if then and path.is_relative_to(then) and Path(then) != layout.root:
        return layout.root / path.relative_to(then)
    return path


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


def publish_model(layout: DataLayout, model_dir: Path, run_id: str, *, check: Callable[[Path], object]) -> Path:
    """Copy ``model_dir`` to ``models/published/<run_id>`` and point ``models/current`` at it;
    returns the published copy. Older copies beyond :data:`KEEP_PUBLISHED` are removed.

    ``check(folder)`` says whether a folder can be served (the core's loadability check: it
    raises ``ValueError`` naming what is missing). It runs on the copy, not only the source
    (a copy can fail halfway), before the copy is renamed into place and the link switched: on
    refusal the copy is removed, ``models/current`` and ``models/published/`` stay as they were,
    and :class:`PublishError` says why."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise PublishError(f"{model_dir}: no such model directory; models/current is unchanged")
    layout.published_models_dir.mkdir(parents=True, exist_ok=True)
    target = layout.published_models_dir / run_id
    tmp = target.with_name(f".{run_id}.{uuid.uuid4().hex}.tmp")  # the writer lock sweeps it if a publish is killed
    try:
        # tb: the training's TensorBoard files (mosaic_core.modeling.modeldir.TB_DIR), not the model's
        shutil.copytree(model_dir, tmp, ignore=shutil.ignore_patterns("checkpoints", "tb", ".*"))
        _normalise_modes(tmp)
        os.utime(tmp)  # copytree kept the source's time; the publication time orders the copies to prune
        try:
            check(tmp)
        except ValueError as exc:
            raise PublishError(f"{model_dir} was not published: its copy does not load ({exc}); models/current "
                               "is unchanged") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = target.with_name(f".{run_id}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)
    link = layout.current_model_path
    new_link = link.with_name(f".{link.name}.tmp")
    new_link.unlink(missing_ok=True)
    # relative ("published/<run_id>"): the link stays valid when the root is moved or mounted elsewhere
    os.symlink(os.path.relpath(target, link.parent), new_link, target_is_directory=True)
    os.replace(new_link, link)
    copies = sorted((p for p in layout.published_models_dir.iterdir() if p.is_dir() and not p.name.startswith(".")),
                    key=lambda p: p.stat().st_mtime)
    for stale in copies[:-(KEEP_PUBLISHED + 1)]:
        if stale != target:
            shutil.rmtree(stale, ignore_errors=True)
    return target


def _normalise_modes(top: Path) -> None:
    """Give the files under ``top`` 0o666 and its folders 0o777, less the umask: what any file
    written here gets (copytree keeps the source's modes, and safetensors, hence every
    ``save_pretrained``/``SentenceTransformer.save``, writes weights through a 0600 temporary file)."""
    umask = _umask(top)
    for folder, _, files in os.walk(top):
        os.chmod(folder, 0o777 & ~umask)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, 0o666 & ~umask)


def _umask(beside: Path) -> int:
    """The process umask, read without setting it (``os.umask`` sets it, racing with the threads
    of a flow that create files meanwhile)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    probe = beside / ".umask-probe"
    os.mkdir(probe, 0o777)
    try:
        return 0o777 & ~probe.stat().st_mode
    finally:
        probe.rmdir()
