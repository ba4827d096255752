"""``rebuild``: the scheduled flow. For a source that watches files (a PubMed snapshot, the
demo's) it lists them and runs ``mosaic_pipeline`` only when files were added or changed since
the last successful rebuild; any other source runs every time, from cache where nothing changed. The
pipeline's caches then redo only the new partitions of ingest and filter, and a run that finds new
pairs beside the live models is an update tick that trains on them alone (:mod:`flows.update`;
``full``: a full rebuild instead)."""

from __future__ import annotations

import logging
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import deployment
from prefect.states import Completed, State

from flows.pipeline import mosaic_pipeline
from flows.demo import demo_config
from flows.orphans import stop_with_parent
from flows.sources import source_hook
from storage.lock import RootBusy, root_lock
from tasks.config_file import load_pipeline_config
from tasks.rebuild import record_snapshot, snapshot_changes

log = logging.getLogger(__name__)


@flow(name="rebuild")
def rebuild(config_file: str | None = None, data_root: str = "mosaic-data", force: bool = False,
            full: bool = False) -> dict | State:
    """Rebuild the domain model if the snapshot source has new or changed files.

    ``config_file``: pipeline YAML (docs/pipeline.example.yaml; default: the built-in demo);
    ``data_root``: where data, models and the report live; ``force``: run even if nothing changed;
    ``full``: a full rebuild (stage 1 and every stage over all pairs), not an update tick on the
    new pairs (:mod:`flows.update`), which is what a run with live models and new pairs is otherwise.
    A tick that finds another command writing the data root ends as *Skipped* (a completed
    state saying who holds it), not failed: the next tick runs as usual. A deployment's run stops
    within seconds if its serve or worker dies (:mod:`flows.orphans`).
    """
    if deployment.id is not None:  # run by a serve or a worker, in a process of its own
        stop_with_parent()
    root = str(Path(data_root).expanduser().resolve())
    try:
        with root_lock(root, "rebuild deployment", advice="the next scheduled or triggered run tries again"):
            return _rebuild(config_file, root, force, full)
    except RootBusy as exc:
        log.warning("rebuild skipped: %s", exc)
        create_markdown_artifact(key="rebuild", description="Scheduled rebuild", markdown=f"Skipped: {exc}.")
        return Completed(name="Skipped", message=f"skipped: {exc}")


def _rebuild(config_file: str | None, root: str, force: bool, full: bool) -> dict:
    cfg = load_pipeline_config(config_file) if config_file else demo_config(root)
    source, watch = cfg.source, source_hook(cfg.source, "watch")
    if watch is None:  # the caches rerun only what a change to the source reaches
        result = mosaic_pipeline(cfg, root, full)
        create_markdown_artifact(key="rebuild", description="Scheduled rebuild",
                                 markdown=f"Rebuilt from `{source.describe()}` ({result['tick']['words']}): "
                                          f"{result['published_words']}; report `{result['report']['html']}`.")
        return {"rebuilt": True, **result}
    files = watch(source, root)
    changes, signature = snapshot_changes(files, root)
    if not (force or changes["new"] or changes["changed"]):
        create_markdown_artifact(key="rebuild", description="Scheduled rebuild",
                                 markdown=f"No new or changed files in `{source.describe()}` "
                                          f"({len(files)} files): nothing rebuilt.")
        return {"rebuilt": False, "changes": changes}
    result = mosaic_pipeline(cfg, root, full)
    record_snapshot(signature, root)
    listed = ", ".join(changes["new"][:20] + changes["changed"][:20]) or "none (forced)"
    create_markdown_artifact(key="rebuild", description="Scheduled rebuild",
                             markdown=f"Rebuilt from `{source.describe()}`: {len(changes['new'])} new, "
                                      f"{len(changes['changed'])} changed files ({listed}); {result['tick']['words']}: "
                                      f"{result['published_words']}; report `{result['report']['html']}`.")
    return {"rebuilt": True, "changes": changes, **result}
