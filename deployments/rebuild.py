"""The ``rebuild`` deployment: the scheduled rebuild flow with its parameters exposed in the UI."""

from __future__ import annotations

from deployments import DEFAULT_CRON
from flows import PACKAGE_LOGGERS
from flows.rebuild import rebuild


def rebuild_deployment(config_file: str | None, data_root: str, cron: str | None = DEFAULT_CRON,
                       name: str = "rebuild", pool: str | None = None, working_dir: str | None = None):
    """A ``RunnerDeployment`` ``rebuild/name`` of :func:`flows.rebuild.rebuild`: for
    ``prefect.serve``, or (``pool``) for the workers of that process work pool, whose runs start
    in ``working_dir`` and import the flow from the installed package."""
    from prefect.deployments.runner import EntrypointType

    on_pool = {} if pool is None else {
        "work_pool_name": pool, "entrypoint_type": EntrypointType.MODULE_PATH,
        # A worker's run imports Prefect before the flow's package: its loggers are named here.
        "job_variables": {"working_dir": working_dir, "env": {
            "PREFECT_LOGGING_EXTRA_LOGGERS": ",".join(PACKAGE_LOGGERS), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}}}
    return rebuild.to_deployment(
        name=name,
        cron=cron,
        parameters={"config_file": config_file, "data_root": data_root, "force": False, "full": False},
        description=f"Rebuild the adapted model of {data_root} when the snapshot source has new files.",
        tags=["mosaic"],
        **on_pool,
    )
