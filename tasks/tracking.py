"""Prefect tasks of MLflow tracking (opt-in: ``tracking.mlflow_uri``): one MLflow run per pipeline
run (or per ``mosaic train``), a nested run per stage that ran.

A stage's run is logged after the stage, from what it wrote: its TensorBoard event files
(``<stage>/tb``, the same series with the same steps; ``train_log.jsonl`` where there are
none), its ``stage.json`` and its config. A stage whose model is already in the experiment (the
same model fingerprint, tag ``mosaic.model_fingerprint``: a cached rerun) is not logged again.
Every call here warns and gives up rather than raise: a lost tracking server never fails a run.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from mosaic_core.config import TrackingConfig
from mosaic_core.modeling.fingerprint import model_fingerprint
from mosaic_core.modeling.modeldir import MODEL_CARD, read_stage_record
from mosaic_core.modeling.tracking import INSTALL_HINT, TB_DIR, flatten
from mosaic_core.trainer.tracking import record_scalars

log = logging.getLogger(__name__)
FINGERPRINT_TAG = "mosaic.model_fingerprint"
STAGE_TAG = "mosaic.stage"
_MAX_PARAM = 6000  # MLflow's longest parameter value


class TrackingUnavailable(RuntimeError):
    """MLflow was asked for (``--mlflow-uri``, ``tracking.mlflow_uri``) and is not installed."""


def check_mlflow() -> None:
    """Raise :class:`TrackingUnavailable`, saying how to install it, when mlflow cannot be imported."""
    try:
        import mlflow  # noqa: F401
    except ImportError as exc:
        raise TrackingUnavailable(f"MLflow tracking was asked for but mlflow is not installed: {INSTALL_HINT}") from exc


def _client(uri: str):
    check_mlflow()
    # A lost server should cost seconds, not MLflow's default minutes of retries (user settings win).
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    if uri.startswith("file:") or "://" not in uri:  # MLflow 3 refuses its file store unless told it may
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _guarded(what: str, call: Callable[[], Any]) -> Any:
    """``call()``, or ``None`` with a warning when MLflow fails: tracking never fails the run."""
    try:
        return call()
    except TrackingUnavailable as exc:
        log.warning("%s", exc)
    except Exception as exc:  # a lost server, a refused write: reported, never raised
        log.warning("MLflow: could not %s (%s: %s); the run goes on without it", what, type(exc).__name__,
                    str(exc).splitlines()[0] if str(exc) else "")
    return None


def _experiment_id(client, name: str) -> str:
    found = client.get_experiment_by_name(name)
    return found.experiment_id if found is not None else client.create_experiment(name)


def _log_params(client, run_id: str, params: Mapping[str, object]) -> None:
    from mlflow.entities import Param

    flat = [Param(_key(k)[:250], (v if isinstance(v, str) else json.dumps(v, default=str))[:_MAX_PARAM])
            for k, v in flatten(params).items()]
    for lo in range(0, len(flat), 100):
        client.log_batch(run_id, params=flat[lo:lo + 100])


def _log_metrics(client, run_id: str, points: list[tuple[str, float, int, int]]) -> None:
    """(key, value, step, timestamp ms) points, 1,000 per request."""
    from mlflow.entities import Metric

    metrics = [Metric(_key(k), v, ts, step) for k, v, step, ts in points if math.isfinite(v)]
    for lo in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[lo:lo + 1000])


def _key(name: str) -> str:
    """A metric name MLflow accepts (letters, digits, ``_ - . / : space``): ``val/ndcg@10`` → ``val/ndcg_at_10``."""
    return re.sub(r"[^A-Za-z0-9_\-./: ]", "_", name.replace("@", "_at_"))


def stage_series(out_dir: Path) -> list[tuple[str, float, int, int]]:
    """Every scalar a stage logged, as (tag, value, step, timestamp ms): from its TensorBoard
    event files, else (no tensorboard package) from its ``train_log.jsonl``."""
    tb = out_dir / TB_DIR
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        EventAccumulator = None  # noqa: N806
    if EventAccumulator is not None and tb.is_dir():
        acc = EventAccumulator(str(tb), size_guidance={"scalars": 0})
        acc.Reload()
        return [(tag, e.value, e.step, int(e.wall_time * 1000)) for tag in acc.Tags()["scalars"]
                for e in acc.Scalars(tag)]
    log_path, now = out_dir / "train_log.jsonl", int(time.time() * 1000)
    records = [json.loads(line) for line in log_path.read_text().splitlines()] if log_path.is_file() else []
    return [(tag, v, r["step"], now) for r in records for tag, v in record_scalars(r).items()]


def _stage_run(client, experiment_id: str, parent_id: str, name: str, out_dir: Path,
               params: Mapping[str, object]) -> str:
    fingerprint = model_fingerprint(str(out_dir))
    done = client.search_runs([experiment_id], f"tags.`{FINGERPRINT_TAG}` = '{fingerprint}'", max_results=1)
    if done:
        log.info("MLflow: stage %s is already logged (run %s, same model): not logged again", name,
                 done[0].info.run_id)
        return done[0].info.run_id
    run = client.create_run(experiment_id, run_name=name, tags={
        "mlflow.parentRunId": parent_id, FINGERPRINT_TAG: fingerprint, STAGE_TAG: name, "mosaic.model": str(out_dir)})
    run_id = run.info.run_id
    record = read_stage_record(out_dir) if (out_dir / "stage.json").is_file() else {}
    _log_params(client, run_id, {**params, **({"stage": record["config"]} if "config" in record else {}),
                                 **({"input_model": record["input_model"]} if "input_model" in record else {})})
    _log_metrics(client, run_id, stage_series(out_dir))
    for name_ in (MODEL_CARD, "stage.json", "train_log.jsonl", "vocab_report.md"):
        if (out_dir / name_).is_file():
            client.log_artifact(run_id, str(out_dir / name_))
    client.set_terminated(run_id, "FINISHED")
    return run_id


@task(name="mlflow-start", cache_policy=NO_CACHE)
def start_run(tracking: TrackingConfig, name: str, params: dict, tags: dict | None = None) -> str | None:
    """Open the run of a pipeline (or of ``mosaic train``) in ``tracking.experiment``; its id, or
    ``None`` (warned) when MLflow cannot be reached: the other tasks then log nothing."""
    def start() -> str:
        client = _client(tracking.mlflow_uri)
        run = client.create_run(_experiment_id(client, tracking.experiment), run_name=name, tags=tags or {})
        _log_params(client, run.info.run_id, params)
        log.info("MLflow: run %s (%s) in experiment %s at %s", run.info.run_id, name, tracking.experiment,
                 tracking.mlflow_uri)
        return run.info.run_id
    return _guarded("start a run", start)


@task(name="mlflow-stage", cache_policy=NO_CACHE)
def log_stage(tracking: TrackingConfig, parent_id: str | None, name: str, out_dir: str,
              params: dict | None = None) -> str | None:
    """The nested run of the stage that wrote ``out_dir`` (params: its config and ``params``;
    metrics: its series with their steps; its model card and logs as artifacts), unless the
    same model is logged already. Its run id, or ``None``."""
    if parent_id is None:
        return None

    def stage() -> str:
        client = _client(tracking.mlflow_uri)
        return _stage_run(client, client.get_run(parent_id).info.experiment_id, parent_id, name, Path(out_dir),
                          params or {})
    return _guarded(f"log stage {name}", stage)


@task(name="mlflow-pipeline", cache_policy=NO_CACHE)
def log_outcome(tracking: TrackingConfig, run_id: str | None, scores: dict[str, list[dict]], decision: dict,
                report: dict[str, str], final_model: str, facts: dict) -> None:
    """A pipeline run's outcome on its run: ``facts`` as parameters (funnel counts, tokens
    added), the evaluation table (artifact ``evaluation.json`` and metrics ``eval/<model>/<task>``),
    the gate decision, the report folder, the final model's card and the published model."""
    if run_id is None:
        return

    def outcome() -> None:
        client, now = _client(tracking.mlflow_uri), int(time.time() * 1000)
        _log_params(client, run_id, facts)
        rows = [(m, s["task"], s["value"]) for m, ss in scores.items() for s in ss]
        client.log_table(run_id, {"model": [r[0] for r in rows], "task": [r[1] for r in rows],
                                  "score": [r[2] for r in rows]}, "evaluation.json")
        _log_metrics(client, run_id, [(f"eval/{m}/{t}", float(v), 0, now) for m, t, v in rows]
                     + [("gate/passed", float(decision["check"]["passed"]), 0, now),
                        ("gate/published", float(decision["published"]), 0, now)])
        client.log_dict(run_id, decision, "gate_decision.json")
        client.set_tag(run_id, "mosaic.gate", decision["message"][:5000])
        report_dir = Path(report["html"]).parent
        client.log_artifacts(run_id, str(report_dir), "report")
        if (Path(final_model) / MODEL_CARD).is_file():
            client.log_artifact(run_id, str(Path(final_model) / MODEL_CARD), "model_card")
        if decision.get("published_path"):
            client.log_artifacts(run_id, decision["published_path"], "published_model")
    _guarded("log the pipeline's outcome", outcome)


@task(name="mlflow-end", cache_policy=NO_CACHE)
def end_run(tracking: TrackingConfig, run_id: str | None, status: str = "FINISHED") -> None:
    """Close the run (``FINISHED`` or ``FAILED``)."""
    if run_id is not None:
        _guarded("close the run", lambda: _client(tracking.mlflow_uri).set_terminated(run_id, status))
