"""Task runners for the per-file and per-chunk maps of ingest and filter."""

from __future__ import annotations

import socket
import urllib.parse

CONNECT_TIMEOUT_S = 5.0
DASK_PORT = 8786


class SchedulerUnreachable(ConnectionError):
    """The Dask scheduler given by address does not answer; the message says which and what to do."""


def check_scheduler(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`SchedulerUnreachable` unless something accepts connections at ``address``
    (``tcp://host:port``) within ``timeout_s``: Dask's own client would otherwise retry for
    minutes before the flow fails."""
    parts = urllib.parse.urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port or DASK_PORT
    except ValueError as exc:  # a port that is not a number
        raise SchedulerUnreachable(f"--dask-address {address!r}: {exc}; expected tcp://HOST:PORT") from exc
    if not host:
        raise SchedulerUnreachable(f"--dask-address {address!r}: no host; expected tcp://HOST:PORT")
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        raise SchedulerUnreachable(f"Dask scheduler {address} does not answer ({exc}): start it (`dask scheduler`), "
                                   "check the address, or leave out --dask-address / dask_address to run on this "
                                   "machine") from exc


def task_runner(workers: int = 1, dask_address: str | None = None):
    """Threads for I/O-bound work on one machine; Dask processes (``workers`` > 1) or an
    existing Dask cluster (``dask_address``, e.g. tcp://scheduler:8786, checked to answer
    first) for CPU-bound maps."""
    if dask_address or workers > 1:
        from prefect_dask import DaskTaskRunner

        if dask_address:
            check_scheduler(dask_address)
            return DaskTaskRunner(address=dask_address)
        # The local cluster's scheduler and dashboard listen on loopback only: nothing the project
        # starts is open to the network unless a user points it at a cluster of their own.
        return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "processes": True,
                                              "host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"})
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=4)
