"""``--mlflow-uri`` of ``mosaic run`` and ``mosaic train``, and the lines that say where to watch a run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from cli.common import InputProblem
from mosaic_core.config import TrackingConfig

MlflowUri = Annotated[Optional[str], typer.Option(
    "--mlflow-uri", help="Also track the run in MLflow: a server (http://127.0.0.1:5000) or a local store "
    "(file:./mlruns); one run, a nested run per stage. Needs pip install 'mosaic[tracking]'.")]


def mlflow_tracking(uri: str | None, configured: TrackingConfig | None = None) -> TrackingConfig | None:
    """The tracking section with ``--mlflow-uri`` in it (the config's experiment kept), or ``None``
    without the option; exits 2, saying how to install it, when mlflow is missing but asked for."""
    wanted = uri or (configured.mlflow_uri if configured else None)
    if wanted:
        from tasks.tracking import TrackingUnavailable, check_mlflow

        try:
            check_mlflow()
        except TrackingUnavailable as exc:
            raise InputProblem(str(exc)) from exc
    if not uri:
        return None
    return (configured or TrackingConfig()).model_copy(update={"mlflow_uri": uri})


def print_tracking(out: Console, root: Path, tracking: TrackingConfig | None) -> None:
    """The one command that opens TensorBoard on the run (and where its MLflow run is)."""
    from mosaic_core.modeling.tracking import tensorboard_available

    if tensorboard_available():
        out.print(f"[green]TensorBoard:[/green] tensorboard --logdir {root}")
    if tracking is not None and tracking.mlflow_uri:
        ui = (f"mlflow ui --backend-store-uri {tracking.mlflow_uri}" if "://" not in tracking.mlflow_uri
              or tracking.mlflow_uri.startswith(("file:", "sqlite:")) else tracking.mlflow_uri)
        out.print(f"[green]MLflow:[/green] experiment {tracking.experiment!r}: {ui}")
