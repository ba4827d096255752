"""What a run decides after training, on a full rebuild and an update tick alike: the model the
gate judges (the adapted model or the control), the glossary terms the report shows, and the
run's result in words."""

from __future__ import annotations

from pathlib import Path

from flows.evaluate import eval_flow
from mosaic_core.config import EvalConfig, PipelineConfig, TrainConfig
from tasks.evaluate import write_model_cards
from tasks.export import export_published
from tasks.glossary import describe_terms
from tasks.publish import decide_and_publish, pick_recipe
from tasks.results import recorded_beside


def choose_candidate(cfg: PipelineConfig, models: dict[str, str], final: str,
                     data_root: str) -> tuple[str, dict | None]:
    """(the model the gate judges, how it was chosen): with a control, the better of it and the
    adapted model on the validation pairs (the control unless the adapted model is ahead beyond
    noise); ``gate.beat_control`` keeps the adapted model, which must then beat the control."""
    if "control" not in models:
        return final, None
    scores = {} if not cfg.train.validation_pairs else eval_flow(  # none: nothing to tell them apart on
        {final: models[final], "control": models["control"]},
        EvalConfig(tasks=(cfg.validation_spec(data_root),), prompts=cfg.prompts,
                   model_kind="sparse" if cfg.model_kind == "sparse" else "auto"),
        str(Path(data_root) / "report" / "validation"))["scores"]
    recipe = pick_recipe(final, "control", scores)
    return (final if cfg.gate.beat_control else recipe["model"]), recipe


def taught_terms(cfg: PipelineConfig, vocab: dict, stages: list[dict], train: TrainConfig, stage1: str,
                  data_root: str) -> list[dict]:
    """The run report's glossary terms (:func:`describe_terms`): the adapted model against the model
    that entered the dictionary stage (else stage 1)."""
    added = (vocab.get("glossary") or {}).get("added") or []
    if not added:
        return []
    names = [s["stage"] for s in stages]
    at = names.index(train.dictionary.name) if train.dictionary is not None and train.dictionary.name in names else 0
    before = stages[at - 1]["out_dir"] if at > 0 else stage1
    return recorded_beside(describe_terms, data_root)(added, before, stages[-1]["out_dir"], data_root,
                                                     cfg.vocab.text_columns, cfg.base_model)


def published_words(decision: dict, candidate: str) -> str:
    """What a run's summary says of its result: the model it published and which one that is (the
    adapted model or the control), or that it published none and which stays in use."""
    which = "the control, plain fine-tuning of the base" if candidate == "control" else "the adapted model"
    if decision["published"]:
        return f"published model `{decision['published_path']}` ({which})"
    kept = f"`{decision['previous']}`, kept" if decision["previous"] else "none yet"
    return f"nothing published ({which} was judged); published model {kept}"


def judge_and_publish(cfg: PipelineConfig, models: dict[str, str], final: str, scores: dict[str, list[dict]],
                      data_root: str, run_id: str) -> tuple[str, dict, list]:
    """After the evaluation, on a full rebuild and an update tick alike: the model cards written
    with the scores, the candidate chosen (:func:`choose_candidate`), the gate's decision against
    the base and the published model (and the control with ``gate.beat_control``), the exports
    of the published model. Returns (the candidate's name, the decision, the exports)."""
    control = "control" if "control" in models else None
    write_model_cards({m: p for m, p in models.items() if m != "published"}, scores, "base", cfg.domain, control)
    candidate, recipe = choose_candidate(cfg, models, final, data_root)
    decision = decide_and_publish(run_id, candidate, models, scores,
                                  ["base", *(["published"] if "published" in models else []),
                                   *(["control"] if cfg.gate.beat_control else [])], cfg.gate_tasks(),
                                  cfg.gate.tolerance, data_root, cfg.gate.publish, recipe)
    exports = (export_published(data_root, list(cfg.export), cfg.train.heldout_pairs, cfg.train.query_column,
                                cfg.train.document_column) if cfg.export else [])
    return candidate, decision, exports
