"""The training flow: stages in order (e.g. joint → contrastive), each from the previous model."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_table_artifact

from mosaic_core.config import TrackingConfig, TrainConfig
from mosaic_core.modeling.losses import LOSS_TERMS
from storage.lock import root_lock
from tasks.margins import with_margins
from tasks.negatives import with_hard_negatives
from tasks.tracking import end_run, log_stage, start_run
from tasks.train import default_processes, merge_task, train_stage_task, with_warmup


def stage_dir(out_root: str, index: int, name: str) -> str:
    return str(Path(out_root) / f"{index + 1}-{name}")


def stage_rows(results: list[dict]) -> list[dict]:
    """One summary row per stage result, every row with the same columns: losses (every term a
    stage of the run recorded), last held-out retrieval (None for a stage that scored none: the
    dictionary stage), time, resume point."""
    terms = [t for t in LOSS_TERMS if any(r["final"].get(t) for r in results)]
    scored = list(dict.fromkeys(k for r in results if r["evals"] for k in r["evals"][-1] if k not in ("step", "n")))
    return [{"stage": r["stage"], "steps": r["steps"], "pairs": r["pairs"],
             "loss": round(r["final"].get("total", 0.0), 4),
             **{k: round(r["final"].get(k, 0.0), 4) for k in terms},
             **{f"held-out {k}": (round(r["evals"][-1][k], 4) if r["evals"] and k in r["evals"][-1] else None)
                for k in scored},
             "minutes": round(r["seconds"] / 60, 1), "resumed from": r["resumed_from"], "model": r["out_dir"]}
            for r in results]


@flow(name="train")
def train_flow(input_model: str, pairs_source: str, cfg: TrainConfig, out_root: str,
               processes: int | None = None, tracking: TrackingConfig | None = None,
               parent_run: str | None = None) -> list[dict]:
    """Run ``cfg.stages`` from ``input_model`` (a stage-1 output for domain-token MLM) on the
    pairs of ``pairs_source``; stage i writes ``out_root/<i>-<name>``, the optional merge step
    ``out_root/<n+1>-merge``. A stage reads its own ``pairs`` when it names them (seed 004's
    general-then-domain training), else the run's. An input model without an MLM head gets a
    head-only MLM warm-up before a joint first stage (``cfg.mlm_warmup``, numbered with the
    stages), and a glossary's dictionary stage (``cfg.dictionary``) follows it. A completed stage
    comes from cache; a failed one resumes from its last checkpoint when the flow is run again. A
    pairs file is converted once into an examples file under ``out_root/examples`` that the stages
    memory-map. Stages needing hard negatives on a source without them get them mined first
    (``out_root/hard_negatives-<stage>.arrow``), and a margin_mse stage's negatives are labelled by
    its teacher (``out_root/margins-<stage>.arrow``).
    With ``tracking.mlflow_uri``, each stage is a nested MLflow run of ``parent_run`` (the
    pipeline's), or of a run of its own."""
    own = tracking is not None and tracking.mlflow_uri is not None and parent_run is None
    run_id = start_run(tracking, "train", {"train": cfg.model_dump(mode="json"), "input_model": input_model,
                                           "pairs": pairs_source}) if own else parent_run
    try:
        results = _train(input_model, pairs_source, cfg, out_root, processes, tracking, run_id)
    except BaseException:
        if own:
            end_run(tracking, run_id, "FAILED")
        raise
    if own:
        end_run(tracking, run_id)
    return results


def _train(input_model: str, pairs_source: str, cfg: TrainConfig, out_root: str, processes: int | None,
           tracking: TrackingConfig | None, run_id: str | None) -> list[dict]:
    """:func:`train_flow`'s stages under the output root's lock; each logged to ``run_id``."""
    with root_lock(out_root, "train flow"):
        cfg = with_warmup(cfg, input_model).with_dictionary()
        results, model, mined, labelled = [], input_model, {}, {}
        examples = str(Path(out_root) / "examples")
        for i, stage in enumerate(cfg.stages):
            out = stage_dir(out_root, i, stage.name)
            source = stage.pairs or pairs_source
            if stage.hard_negatives:  # mined once per source (a no-op for one that carries them)
                key = (source, *cfg.columns_for(stage))
                if key not in mined:
                    mined[key] = with_hard_negatives(
                        source, input_model, *cfg.columns_for(stage), stage.hard_negatives,
                        (stage.query_max_length, stage.document_max_length),
                        str(Path(out_root) / f"hard_negatives-{stage.name}.arrow"), examples,
                        stage.prompts.model_dump() if stage.prompts else None, cfg.negative_rule)
                source = mined[key]
            if stage.objective == "margin_mse":  # labelled once per source, teacher and negatives trained on
                held_out = (cfg.heldout_pairs, cfg.validation_pairs)
                key = (source, stage.teacher, *cfg.columns_for(stage), stage.hard_negatives)
                if key not in labelled:
                    labelled[key] = with_margins(source, stage.teacher, *cfg.columns_for(stage),
                                                 stage.hard_negatives, held_out,
                                                 str(Path(out_root) / f"margins-{stage.name}.arrow"), examples)
                source = labelled[key]
            results.append(train_stage_task(model, source, stage, cfg.data_for(stage), out, examples,
                                            processes or default_processes()))
            model = out
            if run_id is not None:
                log_stage(tracking, run_id, stage.name, out, {"pairs_source": source, "pairs": results[-1]["pairs"]})
        if cfg.merge_weights:
            results.append(merge_task(
                input_model, model, source, cfg, stage_dir(out_root, len(cfg.stages), "merge"), examples))
        create_table_artifact(key="training-stages", table=stage_rows(results),
                              description="Training stages: final losses and held-out retrieval")
        return results
