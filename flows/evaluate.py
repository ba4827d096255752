"""The evaluation flow: models × tasks → scores, the comparison report, and the history."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from mosaic_core.config import EvalConfig
from mosaic_core.evaluate.report import markdown_table
from mosaic_core.evaluate.scoring import TaskScore, TaskUnavailable
from mosaic_core.modeling.fingerprint import model_fingerprint
from mosaic_core.modeling.refs import resolve_model
from storage.benchmarks import BenchmarkError
from storage.lock import root_lock
from storage.vectors import model_folder
from tasks.evaluate import ENCODING, evaluate_task, load_task, prune_vectors, record_history, report_task, task_checksum
from tasks.results import recorded_beside


class EvaluationInputError(RuntimeError):
    """Requested tasks are unavailable; the message lists each and how to provide it."""


@flow(name="evaluate")
def eval_flow(models: dict[str, str], cfg: EvalConfig, out_dir: str, data_root: str | None = None,
              keep_vectors: tuple[str, ...] = ()) -> dict:
    """Score every model on every task and write the report to ``out_dir``; with ``data_root``
    the scores are also recorded in its catalog (``mosaic history``), under its writer lock
    (waited for, if another command holds it: the scores are not thrown away), as rows of the
    pipeline run that called it (of its own run, alone). ``keep_vectors`` (a pipeline run, which
    holds the root's lock): the models whose embeddings are kept in the root's cache
    (:mod:`storage.vectors`; dense models), the ones the next run scores again (the base, the
    candidates, the published model), so that it encodes only the texts they lack (held-out
    pairs that grew); the cache keeps these models alone."""
    problems, specs = [], []
    for spec in cfg.tasks:  # every task's data is checked before any model is scored
        try:
            load_task(spec)
            specs.append(spec)
        except (TaskUnavailable, BenchmarkError) as exc:
            problems.append(str(exc))
    if problems and not cfg.skip_unavailable:
        raise EvaluationInputError("unavailable evaluation tasks:\n- " + "\n- ".join(problems))
    # One (model, task) at a time: models are large, and transformers' from_pretrained toggles a
    # process-wide "skip weight init" flag that concurrent loads in threads can leave switched off.
    dims = cfg.dims or (None,)  # --dims: each task at each embedding size, named TASK@DIM
    evaluate = recorded_beside(evaluate_task, out_dir)
    prompts = cfg.prompts.model_dump() if cfg.prompts else None
    fingerprints = {m: model_fingerprint(resolve_model(p)) for m, p in models.items()}
    vectors = {(m, d): str(model_folder(data_root, fingerprints[m], {
        "kind": cfg.model_kind, "prompts": prompts, "dim": d, "batch_size": cfg.batch_size, "code": ENCODING}))
        for m in models if m in keep_vectors for d in dims} if data_root else {}
    scores = {m: [TaskScore(**evaluate(m, p, s, str(Path(out_dir) / "predictions" / m / (f"dim{d}" if d else "")),
                                       cfg.batch_size, cfg.model_kind, prompts, d, vectors.get((m, d))))
                  for s in specs for d in dims] for m, p in models.items()}
    if vectors:
        prune_vectors(data_root, list(vectors.values()))
    checksums = {s.name: task_checksum(s) for s in specs}
    checksums |= {f"{name}@{d}": c for name, c in list(checksums.items()) for d in cfg.dims or ()}
    metadata = {**{f"model {m}": f"{p} ({fingerprints[m]})" for m, p in models.items()},
                **{f"task {s.name}": f"{s.kind} {s.source()} ({checksums[s.name]})" for s in specs},
                "eval config": cfg.config_hash()}
    paths = report_task(scores, out_dir, metadata, [f"not evaluated: {p}" for p in problems])
    if data_root:
        # Within a pipeline run, its id: the evaluations' rows and the publish decision match.
        run_id = flow_run.parent_flow_run_id or flow_run.id
        with root_lock(data_root, "evaluate flow", wait=None):
            record_history(data_root, run_id, flow_run.id, [
                {"model": m, "model_path": models[m], "model_fingerprint": fingerprints[m], "task": s.task,
                 "task_checksum": checksums[s.task], "metric": s.metric, "value": s.value}
                for m, ss in scores.items() for s in ss])
    create_markdown_artifact(key="evaluation-report", markdown=markdown_table(scores, {}),
                             description=f"Evaluation report: {paths['html']}")
    return {"scores": {m: [s.__dict__ for s in ss] for m, ss in scores.items()},
            "report": {k: str(v) for k, v in paths.items()}, "unavailable": problems}
