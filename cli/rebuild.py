"""``mosaic serve`` and ``mosaic deploy``: the scheduled rebuild as a Prefect deployment, one per
data root, run by this process or by the workers of a work pool.

Everything either can find wrong — its config, its source, a serve already running for its
data root, a Prefect API that does not answer, a missing work pool, a deployment of its name
that another serve holds — is reported before the deployment is registered, and a serve's
before Prefect's runner (and the flows' imports, torch's among them) load.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Optional

import typer

from cli.common import DataRoot, InputProblem, _folder, app, console, out_console
from cli.pipeline import _check_inputs, _pipeline_config
from deployments import DEFAULT_CRON, FLOW_NAME, deployment_name

LIVE_POLL_S = 60
"""A deployment polled this recently by a serve that did not pause it is held by that serve:
a runner polls every 10 s, and Prefect's server marks a deployment not ready after 60 s."""

Config = Annotated[Optional[Path], typer.Option(
    "--config", "-c", help="Pipeline YAML of the rebuilds (default: the built-in demo).")]
Cron = Annotated[str, typer.Option(help="Schedule of the rebuild (cron, UTC); '' for manual runs only.")]
Name = Annotated[Optional[str], typer.Option(
    "--name", help="The deployment's name (rebuild/NAME). Default: the data root's folder name and a hash of its "
    "path, so that each data root has a deployment of its own.")]


def _checked_config(config: Path | None, root: str) -> str | None:
    """The config file as the deployment's parameter (absolute), after checking what a run of it
    into ``root`` reads: the config itself, its models and files, and that its source answers (a
    mirror's listing, a local snapshot's folder)."""
    if config is None:
        return None  # the built-in demo: generated into the data root by the run
    cfg = _pipeline_config(config)
    _check_inputs(cfg, config, Path(root))
    if cfg.source.kind == "pubmed":
        from storage.sources import SourceError, list_source

        try:
            list_source(cfg.source.source, cfg.source.subsets, timeout=10)
        except SourceError as exc:
            raise InputProblem(f"source.source of {config}: {exc}. A rebuild lists it at every tick: give a "
                               "mirror that answers or a folder that exists") from exc
    return str(config.expanduser().resolve())


def _prefect_api() -> str:
    """The configured Prefect API's URL, after checking it answers: a deployment lives there."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    start = ("start one (`prefect server start`) and point the client at it "
             "(`prefect config set PREFECT_API_URL=http://127.0.0.1:4200/api`)")
    if not url:
        raise InputProblem(f"no Prefect API is configured for the deployment: {start}")
    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        raise InputProblem(f"the Prefect API {url} does not answer ({exc}): {start}") from exc
    return url


def _live_serve(deployment) -> float | None:
    """Seconds since a serve polled ``deployment``, if one holds it (polled within
    :data:`LIVE_POLL_S`, not paused; a serve pauses its deployment as it stops); else None."""
    if deployment.paused or deployment.last_polled is None:
        return None
    age = datetime.now(timezone.utc) - deployment.last_polled
    return age.total_seconds() if age < timedelta(seconds=LIVE_POLL_S) else None


def _check_free(name: str, root: str, pool: str | None = None) -> None:
    """Refuse ``rebuild/name`` when a live serve holds it (another data root's, for a serve: this
    root's serve lock is ours, so one of this root is gone), or, for a serve (``pool`` None),
    when it runs on a work pool. Anything else is taken over."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            existing = client.read_deployment_by_name(f"{FLOW_NAME}/{name}")
        except ObjectNotFound:
            return
    if pool is not None:
        if not existing.work_pool_name and (age := _live_serve(existing)) is not None:
            raise InputProblem(f"deployment {FLOW_NAME}/{name} is served by a running `mosaic serve` (polled {age:.0f} "
                               "s ago): stop it first, or deploy under another --name")
        return
    if existing.work_pool_name:
        raise InputProblem(f"deployment {FLOW_NAME}/{name} runs on work pool {existing.work_pool_name}: serve "
                           f"this one under another --name, or delete that one first (`prefect deployment delete "
                           f"{FLOW_NAME}/{name}`)")
    theirs = (existing.parameters or {}).get("data_root")
    if theirs != root and (age := _live_serve(existing)) is not None:
        raise InputProblem(f"deployment {FLOW_NAME}/{name} is served for data root {theirs} by a running "
                           f"`mosaic serve` (polled {age:.0f} s ago): give this one another --name, or stop that one")


@app.command()
def serve(
    data_root: DataRoot = Path("mosaic-data"),
    config: Config = None,
    cron: Cron = DEFAULT_CRON,
    name: Name = None,
) -> None:
    """Serve the data root's `rebuild` deployment: on each scheduled (or UI-triggered) run it lists
    the snapshot source and runs the pipeline only if files were added or changed.

    Each data root has its own deployment, `rebuild/FOLDER-HASH` (printed as it starts; `--name`
    to choose it), and one serve: a second serve of the same data root, or of a deployment another
    serve holds, is refused (exit 3 or 2). The config, its models and its source are checked
    first (a mirror must answer its listing). Needs a Prefect API: start one with `prefect server
    start` (UI at http://127.0.0.1:4200) and `prefect config set
    PREFECT_API_URL=http://127.0.0.1:4200/api`. Runs in this process until interrupted, which
    pauses this deployment's schedule and no other; trigger a run from the UI (Deployments →
    rebuild/NAME → Run) or with `prefect deployment run rebuild/NAME`.
    """
    from storage.lock import serve_lock

    root = _folder(data_root)
    config_file = _checked_config(config, root)
    name = name or deployment_name(root)
    with serve_lock(root, f"mosaic serve (deployment {FLOW_NAME}/{name})"):
        _prefect_api()
        _check_free(name, root)
        from prefect import serve as prefect_serve

        from deployments.rebuild import rebuild_deployment

        console.print(f"serving deployment {FLOW_NAME}/{name} for data root {root}")
        prefect_serve(rebuild_deployment(config_file, root, cron or None, name))


def _check_pool(pool: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(pool)
        except ObjectNotFound:
            raise InputProblem(f"no work pool {pool} on the Prefect API: create it "
                               f"(`prefect work-pool create {pool} --type process`)") from None


@app.command()
def deploy(
    data_root: DataRoot = Path("mosaic-data"),
    config: Config = None,
    cron: Cron = DEFAULT_CRON,
    name: Name = None,
    pool: Annotated[str, typer.Option(help="The Prefect work pool whose workers run the rebuilds.")
                    ] = "mosaic-process",
) -> None:
    """Register the data root's `rebuild` deployment on a work pool, for a Prefect worker to run
    instead of a `mosaic serve`: `prefect worker start --pool POOL`, in this environment.

    The same checks as `mosaic serve` (config, models, source, the Prefect API, the deployment's
    name), and the pool must exist (`prefect work-pool create mosaic-process --type process`).
    Its runs start in the directory this command ran from (a relative `source:` path is read
    from there, as `mosaic run` reads it). Registers `rebuild/NAME` with its schedule and
    parameters through Prefect's client and exits; run it again to change them.
    """
    root = _folder(data_root)
    config_file = _checked_config(config, root)
    name = name or deployment_name(root)
    _prefect_api()
    _check_pool(pool)
    _check_free(name, root, pool)
    from deployments.rebuild import rebuild_deployment

    rebuild_deployment(config_file, root, cron or None, name, pool=pool, working_dir=str(Path.cwd())).apply()
    out_console().print(f"deployment {FLOW_NAME}/{name} registered on work pool {pool} for data root {root}\n"
                        f"start a worker: prefect worker start --pool {pool}\n"
                        f"run it now:     prefect deployment run {FLOW_NAME}/{name}")
