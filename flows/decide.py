"""What a run decides after training, on a full rebuild and an update tick alike: the model the
gate judges (the adapted model or the control), the glossary terms the report shows, and the
run's result in words."""

from __future__ import annotations

from pathlib import Path

from flows.evaluate import eval_flow
from mosaic_core.config import EvalConfig, PipelineConfig, TrainConfig
from tasks.glossary import describe_terms
from tasks.publish import pick_recipe


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
    return describe_terms(added, before, stages[-1]["out_dir"], data_root, cfg.vocab.text_columns, cfg.base_model)


def published_words(decision: dict, candidate: str) -> str:
    """What a run's summary says of its result: the model it published and which one that is (the
    adapted model or the control), or that it published none and which stays in use."""
    which = "the control, plain fine-tuning of the base" if candidate == "control" else "the adapted model"
    if decision["published"]:
        return f"published model `{decision['published_path']}` ({which})"
    kept = f"`{decision['previous']}`, kept" if decision["previous"] else "none yet"
    return f"nothing published ({which} was judged); published model {kept}"
