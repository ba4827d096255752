"""Prefect tasks of the publish gate: which model is published now, and the decision of a run."""

from __future__ import annotations

import logging
from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from mosaic_core.evaluate.gate import choose_recipe, publish_gate
from mosaic_core.evaluate.report import paired_differences
from mosaic_core.evaluate.scoring import TaskScore
from mosaic_core.modeling.fingerprint import model_fingerprint
from mosaic_core.modeling.refs import ModelNotFound, check_loadable, resolve_model
from storage.layout import DataLayout
from storage.published import (
    PublishError,
    current_model,
    publish_model,
    published_copy,
    read_decision,
    recorded_path,
    write_decision,
)

log = logging.getLogger(__name__)


@task(name="published-model", cache_policy=NO_CACHE)
def published_model(data_root: str) -> str | None:
    """The directory of the model published now under ``data_root`` (``None`` before the first)."""
    path = current_model(DataLayout(data_root))
    return str(path) if path else None


def scores_by_model(scores: dict[str, list[dict]]) -> dict[str, dict[str, float]]:
    """Evaluation results (model → [TaskScore dicts]) as model → task → main score."""
    return {m: {s["task"]: s["value"] for s in ss} for m, ss in scores.items()}


def _decision_markdown(record: dict) -> str:
    rows = "\n".join(f"| {c['task']} | {c['reference']} | {100 * c['score']:.2f} | {100 * c['candidate']:.2f} | "
                     f"{100 * c['delta']:+.2f} |" for c in record["check"]["metadata"]["comparisons"])
    recipe = f"Recipe: {record['recipe']['message']}.\n\n" if record.get("recipe") else ""
    return (f"{recipe}**{record['message']}**\n\n| task | reference | reference score | candidate | Δ |\n"
            f"| --- | --- | ---: | ---: | ---: |\n{rows}\n\nCandidate `{record['candidate']}`; "
            + (f"published as `{record['published_path']}`." if record["published"] else
               f"still published: `{record['previous'] or 'nothing yet'}`."))


def _published_fingerprint(layout: DataLayout, published: Path) -> str | None:
    """The fingerprint of the model a published copy was made from (its run's decision, found by
    the copy's name: ``models/published/<run_id>``, wherever the root is now)."""
    try:
        return read_decision(layout, published.name).get("candidate_fingerprint")
    except PublishError:
        return None


@task(name="choose-recipe", cache_policy=NO_CACHE)
def pick_recipe(adapted: str, control: str, scores: dict[str, list[dict]], task: str = "validation") -> dict:
    """The adapted model or the control, whichever the gate is to judge
    (:func:`~mosaic_core.evaluate.gate.choose_recipe`), from their per-query scores on ``task``."""
    pair = {m: [TaskScore(**s) for s in scores.get(m, []) if s["task"] == task] for m in (control, adapted)}
    difference = next(iter(paired_differences(pair, reference=control)), None)
    choice = choose_recipe(adapted, control, difference).to_dict()
    log.info("recipe: %s", choice["message"])
    return choice


@task(name="publish-gate", cache_policy=NO_CACHE)
def decide_and_publish(run_id: str, candidate: str, models: dict[str, str], scores: dict[str, list[dict]],
                       references: list[str], gate_tasks: list[str], tolerance_points: float, data_root: str,
                       publish: bool = True, recipe: dict | None = None) -> dict:
    """Run the publish gate on ``candidate`` (a name in ``models``) against ``references``; publish
    it if it passes (and ``publish``); record the decision either way. A failed gate is a WARN
    quality check: the run completes, the previous model stays published. A passed model whose
    published copy does not load (:func:`check_loadable`) is an ERROR: not published, the
    decision records why, and :class:`PublishError` fails the task. ``recipe``: how the
    candidate was chosen between the adapted model and the control (:func:`pick_recipe`), recorded."""
    layout = DataLayout(data_root)
    by_model = scores_by_model(scores)
    check = publish_gate(candidate, by_model, [r for r in references if r in by_model], gate_tasks,
                         tolerance_points / 100)
    previous = current_model(layout)
    path = Path(resolve_model(models[candidate]))
    fingerprint = model_fingerprint(str(path))
    published = check.passed and publish
    same = published and previous is not None and _published_fingerprint(layout, previous) == fingerprint
    message = check.message if publish or not check.passed else f"{check.message} (publishing is off)"
    record = {"run_id": run_id, "data_root": str(layout.root), "candidate": str(path),
              "candidate_fingerprint": fingerprint, "published": published, "forced": False,
              "previous": str(previous) if previous else None, "published_path": None,
              "message": f"{message} (the same model was already published: kept as it is)" if same else message,
              "scores": by_model.get(candidate, {}), "references": {r: by_model.get(r, {}) for r in references},
              "check": check.to_dict(), **({"recipe": recipe} if recipe is not None else {})}
    if published:
        try:
            record["published_path"] = str(previous if same else publish_model(layout, path, run_id,
                                                                                check=check_loadable))
        except PublishError as exc:  # the gate passed, but what it passed cannot be served: recorded, then raised
            write_decision(layout, {**record, "published": False, "message": f"not published: {exc}"})
            raise
    write_decision(layout, record)
    (log.info if check.passed else log.warning)("publish gate: %s", record["message"])
    create_markdown_artifact(key="publish-decision", markdown=_decision_markdown(record),
                             description=f"Publish gate: {'passed' if check.passed else 'failed (WARN)'}")
    return record


def _run_model(layout: DataLayout, run_id: str) -> tuple[Path, bool]:
    """(the model a run's decision is about, whether it may be published without ``force``): its
    published copy if it was published once (a rollback), else its candidate, which must be
    unchanged since."""
    decided = read_decision(layout, run_id)
    published = published_copy(layout, decided.get("published_path"))
    if published is not None:
        return published, True
    candidate = recorded_path(layout, decided, decided["candidate"])
    if not candidate.is_dir() or model_fingerprint(str(candidate)) != decided["candidate_fingerprint"]:
        raise PublishError(f"the model run {run_id} produced ({candidate}) has changed or gone since; publish a "
                           "model directory instead, or rerun the pipeline")
    return candidate, decided["check"]["passed"]


@task(name="publish-by-hand", cache_policy=NO_CACHE)
def publish_by_hand(run_or_model: str, data_root: str, reason: str, force: bool) -> dict:
    """Publish a run's model (by run id, see ``mosaic history``: a rollback needs no ``force`` when
    that run passed its gate) or a model directory (``force`` required); the decision records it.
    A model that does not load (:func:`check_loadable`) is refused, ``force`` or not, before
    anything is written: ``force`` overrides the publish gate only."""
    layout = DataLayout(data_root)
    path = Path(run_or_model).expanduser()
    if path.is_dir():
        candidate, passed = path.resolve(), False
    else:
        candidate, passed = _run_model(layout, run_or_model)
    try:
        check_loadable(candidate)
    except ModelNotFound as exc:
        raise PublishError(f"{run_or_model} cannot be published, --force or not: {exc}; models/current is "
                           "unchanged") from exc
    if not (passed or force):
        raise PublishError(f"{run_or_model} did not pass the publish gate (or is a bare model directory): pass "
                           "--force, with --reason, to publish it anyway")
    fingerprint = model_fingerprint(str(candidate))
    run_id = f"manual-{fingerprint}" if path.is_dir() else f"{run_or_model}-republished"
    previous = current_model(layout)
    record = {"run_id": run_id, "data_root": str(layout.root), "candidate": str(candidate),
              "candidate_fingerprint": fingerprint, "published": True, "forced": not passed,
              "previous": str(previous) if previous else None,
              "published_path": str(publish_model(layout, candidate, run_id, check=check_loadable)),
              "message": f"{'forced' if not passed else 'republished'} by hand: {reason}", "scores": {}}
    write_decision(layout, record)
    log.warning("published %s by hand (%s)", candidate, reason)
    return record
