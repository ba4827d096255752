"""``mosaic_pipeline``: the parent flow — the source's pairs (ingest → filter for PubMed; the
source's own flow for the others, ``flows.sources``) → vocab → train stages → evaluation → gate.

Each step is a subflow whose tasks cache their persisted results (keyed as the stage flows
describe), so a rerun of the same configuration redoes only what changed or failed, and a
failed training stage resumes from its checkpoint. The per-file and per-chunk maps of ingest
and filter run on threads, or on Dask when ``workers`` > 1 or ``dask_address`` is set.
"""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from flows.decide import judge_and_publish, published_words, taught_terms
from flows.evaluate import eval_flow
from flows.sources import source_hook
from flows.train import train_flow
from flows.update import update_tick
from flows.vocab import vocab_flow
from mosaic_core.config import EvalConfig, PipelineConfig
from mosaic_core.trainer.continual import FULL
from storage.lock import root_lock
from tasks.continual import prepare_tick, record_tick, tick_summary, tick_words
from tasks.glossary import prepare_glossary
from tasks.heldout import hold_out
from tasks.publish import published_model
from tasks.space import check_disk
from tasks.report import funnel, run_report, story
from tasks.tracking import end_run, log_outcome, log_stage, start_run


@flow(name="mosaic_pipeline")
def mosaic_pipeline(cfg: PipelineConfig, data_root: str, full: bool = False) -> dict:
    """Run the whole pipeline under ``data_root``; models go to ``data_root/models``, the
    evaluation report to ``data_root/report``. The final model is published
    (``data_root/models/current``) only if the publish gate passes: not worse than the base
    model, nor than the model published now, on the gate tasks. A run that finds new pairs
    beside the live models of the root's last run, with the same configuration, is an update
    tick (:mod:`flows.update`) unless ``full`` (or a rule of ``cfg.update``) asks for a full
    rebuild; the returned ``tick`` says which ran and why."""
    run_id = start_run(cfg.tracking, flow_run.name or "mosaic", {"config": cfg.model_dump(mode="json"),
                                                                "data_root": data_root},
                       {"mosaic.prefect_flow_run_id": str(flow_run.id)}) if cfg.tracking.mlflow_uri else None
    try:
        result = _pipeline(cfg, data_root, run_id, full)
    except BaseException:
        end_run(cfg.tracking, run_id, "FAILED")
        raise
    end_run(cfg.tracking, run_id)
    return result


def _pipeline(cfg: PipelineConfig, data_root: str, run_id: str | None, full: bool) -> dict:
    with root_lock(data_root, "mosaic_pipeline flow"):
        started, root = time.monotonic(), Path(data_root)
        check_disk(cfg, data_root)  # a run whose models would not fit is refused before it starts
        ingested, filtered = source_hook(cfg.source, "flow")(cfg.source, cfg, data_root)
        glossary = prepare_glossary(cfg.glossary, data_root, cfg.vocab) if cfg.glossary else None
        held = hold_out(data_root, cfg.train.heldout_pairs, cfg.train.validation_pairs)  # kept as earlier runs held
        plan = prepare_tick(data_root, cfg, full)
        if plan["kind"] != FULL:
            return update_tick(cfg, data_root, plan, {"ingested": ingested, "filtered": filtered, "glossary": glossary,
                                                      "held": held, "started": started}, run_id)
        tick = {**plan, "words": tick_words(plan)}
        stage1 = str(root / "models" / "stage1")
        vocab = vocab_flow(data_root, cfg.vocab, stage1, cfg.glossary, glossary and glossary["entries_path"])
        if run_id is not None:
            log_stage(cfg.tracking, run_id, "stage1", stage1, {"vocab": cfg.vocab.model_dump(mode="json"),
                                                               "tokens_added": vocab["tokens_added"]})
        train = (cfg.training(glossary["dictionary_path"], glossary["dictionary_texts"], glossary["pairs_path"])
                 if glossary else cfg.train)
        stages = train_flow(stage1, data_root, train, str(root / "models"), tracking=cfg.tracking, parent_run=run_id)
        control = (train_flow(cfg.base_model, data_root, train.control(), str(root / "models" / "control"),
                              tracking=cfg.tracking, parent_run=run_id)[-1]["out_dir"] if cfg.trains_control else None)
        tasks = cfg.eval_specs(data_root)
        terms = taught_terms(cfg, vocab, stages, train, stage1, data_root)
        final = stages[-1]["stage"]
        published = published_model(data_root)
        models = {"base": cfg.base_model, "stage1": stage1, **({"control": control} if control else {}),
                  **{s["stage"]: s["out_dir"] for s in stages if s.get("embeddings_trained", True) or s is stages[-1]},
                  **({"published": published} if published else {})}  # a head-only warm-up embeds as stage 1
        # A sparse run scores the base as SPLADE too (on its masked-LM head): like for like.
        eval_cfg = EvalConfig(tasks=tasks, model_kind="sparse" if cfg.model_kind == "sparse" else "auto",
                              prompts=cfg.prompts)  # the base scored with what it is trained with
        report = eval_flow(models, eval_cfg, str(root / "report"), data_root,
                           keep_vectors=("base", final, "control", "published"))  # what the next run scores again
        if dims := cfg.train.stages[-1].matryoshka_dims:  # the final model cut to each size, against the base's
            cut = eval_flow({m: models[m] for m in ("base", final)}, eval_cfg.model_copy(update={"dims": dims}),
                            str(root / "report" / "dims"), data_root)
            report["scores"] = {m: ss + cut["scores"].get(m, []) for m, ss in report["scores"].items()}
        candidate, decision, exports = judge_and_publish(cfg, models, final, report["scores"], data_root,
                                                         str(flow_run.id))
        on_pairs = next(s for s in stages if train.dictionary is None or s["stage"] != train.dictionary.name)
        story_funnel = funnel(ingested, filtered, on_pairs, held["validation"], held["pairs"],
                              cfg.source.funnel_words, glossary["definition_pairs"] if train.extra_pairs else 0)
        report_paths = run_report(story(
            final, report["scores"], decision=decision, vocab=vocab, stages=stages,
            funnel=story_funnel, heldout=held,
            task_words={t.name: t.description for t in tasks if t.description},
            metadata={"base model": cfg.base_model, "data root": data_root, "config": cfg.config_hash()},
            control="control" if control else None, glossary=terms, tick=tick),
            str(root / "report"))
        kept, total = sum(m.kept for m in filtered), sum(m.rows_out for m in filtered)
        if plan["record"]:
            record_tick(data_root, cfg, plan, {"adapted": stages[-1]["out_dir"], **({"control": control} if control
                                                                                     else {})},
                        tick_summary(started, on_pairs["pairs"], stages, vocab, decision, candidate, report["scores"],
                                     str(flow_run.id)))
        if run_id is not None:
            log_outcome(cfg.tracking, run_id, report["scores"], decision, report_paths, stages[-1]["out_dir"],
                        {"tokens_added": vocab["tokens_added"], "pairs_kept": kept, "pairs_filtered": total,
                         "funnel": {step: n for step, n, _ in story_funnel}})
        create_markdown_artifact(
            key="pipeline-summary",
            markdown=(f"**{kept:,} of {total:,} pairs** kept by the filter; **{vocab['tokens_added']:,} tokens** "
                      f"added; stages {', '.join(s['stage'] for s in stages)}; adapted model "
                      f"`{stages[-1]['out_dir']}`; {decision['message']}; {published_words(decision, candidate)}; "
                      f"report `{report_paths['html']}`"),
            description="MOSAIC pipeline run",
        )
        return {"pairs_kept": kept, "pairs": total, "vocab": vocab, "stages": stages, "report": report_paths,
                "scores": report["scores"],
                "final_model": stages[-1]["out_dir"], "decision": decision,
                "published_model": decision["published_path"] or decision["previous"], "exports": exports,
                "published_words": published_words(decision, candidate), "tick": tick}
