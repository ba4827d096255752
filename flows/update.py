"""``update_tick``: a run that finds new pairs beside the live models trains only on them
(:mod:`mosaic_core.trainer.continual`): stage 1 from the live adapted model on the tick's pairs (new
tokens appended, every existing id and row kept), the retrieval stages from it, the control
continued from the live control on the same pairs and steps, then the evaluation, the recipe
choice and the publish gate as on a full rebuild (the published model is a reference)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from flows.decide import judge_and_publish, published_words, taught_terms
from flows.evaluate import eval_flow
from flows.train import train_flow
from flows.vocab import vocab_flow
from mosaic_core.config import EvalConfig, PipelineConfig
from mosaic_core.trainer.continual import NONE, tick_training
from storage.layout import DataLayout
from tasks.continual import measure_score_drift, record_tick, tick_summary, tick_words
from tasks.publish import published_model
from tasks.report import funnel, run_report, story
from tasks.tracking import log_outcome


def standing(plan: dict, data_root: str) -> dict:
    """What a run with nothing new since an update tick returns: the live models stand, the
    last report stays."""
    report = {"markdown": str(Path(data_root) / "report" / "report.md"),
              "html": str(Path(data_root) / "report" / "report.html")}
    published = published_model(data_root)
    message = f"{tick_words(plan)}: nothing trained"
    create_markdown_artifact(key="pipeline-summary", description="MOSAIC pipeline run",
                             markdown=f"{message}; published model `{published or 'none yet'}`")
    return {"pairs_kept": plan["trainable"], "pairs": plan["trainable"], "vocab": {"tokens_added": 0}, "stages": [],
            "report": report, "scores": {}, "final_model": plan["live"].get("adapted"),
            "decision": {"published": False, "message": message, "published_path": None, "previous": published},
            "published_model": published, "exports": [], "tick": {**plan, "words": tick_words(plan)},
            "published_words": f"nothing trained; published model `{published or 'none yet'}` stands"}


@flow(name="update_tick")
def update_tick(cfg: PipelineConfig, data_root: str, plan: dict, parts: dict, run_id: str | None = None) -> dict:
    """The update tick ``plan`` (:func:`tasks.continual.prepare_tick`) of ``data_root``;
    ``parts``: what the pipeline's first steps returned (``ingested``, ``filtered``, ``glossary``,
    ``held``) and when it started (``started``, ``time.monotonic()``: a tick's cost is counted from
    there, as a full rebuild's is). Returns what :func:`flows.pipeline.mosaic_pipeline` returns, with ``tick``."""
    if plan["kind"] == NONE:
        return standing(plan, data_root)
    root, live, glossary = Path(data_root), plan["live"], parts["glossary"]
    out = DataLayout(data_root).tick_dir(plan["tick"])
    stage1 = str(out / "stage1")
    vocab = vocab_flow(plan["pairs_path"], cfg.vocab.model_copy(update={
        "base_model": live["adapted"], "prune": 0.0, "reduce_to_corpus": None, "text_columns": ("query", "document")}),
        stage1, cfg.glossary, glossary and glossary["entries_path"], plan.get("row_budget"))
    pairs = plan["new"] + plan["replay"]
    full_train = (cfg.training(glossary["dictionary_path"], glossary["dictionary_texts"], glossary["pairs_path"])
                  if glossary else cfg.train)
    train = tick_training(full_train, pairs, plan["passes"])
    stages = train_flow(stage1, plan["pairs_path"], train, str(out), tracking=cfg.tracking, parent_run=run_id)
    control = (train_flow(live["control"], plan["pairs_path"], train.control(), str(out / "control"),
                          tracking=cfg.tracking, parent_run=run_id)[-1]["out_dir"]
               if cfg.trains_control and live.get("control") else None)
    final = stages[-1]["stage"]
    published = published_model(data_root)
    models = {"base": cfg.base_model, **({"control": control} if control else {}), final: stages[-1]["out_dir"],
              **({"published": published} if published else {})}
    tasks = cfg.eval_specs(data_root)
    eval_cfg = EvalConfig(tasks=tasks, model_kind="sparse" if cfg.model_kind == "sparse" else "auto",
                          prompts=cfg.prompts)
    report = eval_flow(models, eval_cfg, str(root / "report"), data_root,
                       keep_vectors=("base", final, "control", "published"))  # what the next run scores again
    candidate, decision, exports = judge_and_publish(cfg, models, final, report["scores"], data_root, str(flow_run.id))
    held = parts["held"]
    tick = {**plan, "words": tick_words(plan)}
    story_funnel = funnel(parts["ingested"], parts["filtered"], stages[0], held["validation"], held["pairs"],
                          cfg.source.funnel_words)
    report_paths = run_report(story(
        final, report["scores"], decision=decision, vocab=vocab, stages=stages, funnel=story_funnel, heldout=held,
        task_words={t.name: t.description for t in tasks if t.description},
        metadata={"base model": cfg.base_model, "data root": data_root, "config": cfg.config_hash(),
                  "live adapted model": live["adapted"], "live control": live.get("control")},
        control="control" if control else None, tick=tick,
        glossary=taught_terms(cfg, vocab, stages, train, stage1, data_root)), str(root / "report"))
    serving = candidate if decision["published"] else "published"  # the model published after this tick
    live_scores = next((s["per_query"] for s in report["scores"].get(serving, []) if s["task"] == "heldout"), None)
    record_tick(data_root, cfg, plan, {"adapted": stages[-1]["out_dir"], **({"control": control} if control else {})},
                {**tick_summary(parts["started"], stages[0]["pairs"], stages, vocab, decision, candidate,
                                report["scores"], str(flow_run.id)),
                 "score_drift": measure_score_drift(data_root, cfg, live_scores)})
    kept = sum(m.kept for m in parts["filtered"])
    total = sum(m.rows_out for m in parts["filtered"])
    if run_id is not None:
        log_outcome(cfg.tracking, run_id, report["scores"], decision, report_paths, stages[-1]["out_dir"],
                    {"tokens_added": vocab["tokens_added"], "pairs_kept": kept, "pairs_filtered": total,
                     "tick_pairs": pairs})
    create_markdown_artifact(
        key="pipeline-summary", description="MOSAIC pipeline run",
        markdown=(f"**{tick['words']}**: {vocab['tokens_added']:,} tokens added; stages "
                  f"{', '.join(s['stage'] for s in stages)}; adapted model `{stages[-1]['out_dir']}`; "
                  f"{decision['message']}; {published_words(decision, candidate)}; report `{report_paths['html']}`"))
    return {"pairs_kept": kept, "pairs": total, "vocab": vocab, "stages": stages, "report": report_paths,
            "scores": report["scores"], "final_model": stages[-1]["out_dir"], "decision": decision,
            "published_model": decision["published_path"] or decision["previous"], "exports": exports, "tick": tick,
            "published_words": published_words(decision, candidate)}

