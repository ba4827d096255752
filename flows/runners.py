"""Task runners for the per-file and per-chunk maps of ingest and filter."""

from __future__ import annotations


def task_runner(workers: int = 1, dask_address: str | None = None):
    """Threads for I/O-bound work on one machine; Dask processes (``workers`` > 1) or an
    existing Dask cluster (``dask_address``, e.g. tcp://scheduler:8786) for CPU-bound maps."""
    if dask_address or workers > 1:
        from prefect_dask import DaskTaskRunner

        if dask_address:
            return DaskTaskRunner(address=dask_address)
        # The local cluster's scheduler and dashboard listen on loopback only: nothing the project
        # starts is open to the network unless a user points it at a cluster of their own.
        return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "processes": True,
                                              "host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"})
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=4)
