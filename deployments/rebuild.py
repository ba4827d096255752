"""The ``rebuild`` deployment: the scheduled rebuild flow with its parameters exposed in the UI."""

from __future__ import annotations

from deployments import DEFAULT_CRON
from flows.rebuild import rebuild


def rebuild_deployment(config_file: str | None, data_root: str, cron: str | None = DEFAULT_CRON,
                       name: str = "rebuild"):
    """A ``RunnerDeployment`` ``rebuild/name`` of :func:`flows.rebuild.rebuild` (for ``prefect.serve``)."""
    return rebuild.to_deployment(
        name=name,
        cron=cron,
        parameters={"config_file": config_file, "data_root": data_root, "force": False},
        description=f"Rebuild the adapted model of {data_root} when the snapshot source has new files.",
        tags=["mosaic"],
    )
