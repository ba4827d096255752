"""``mosaic_pipeline``: the parent flow — ingest → filter → vocab → train stages → evaluation
(for the Islamic source: Tafsir-linked verse pairs → threshold filter → the same).

Each step is a subflow whose tasks cache their persisted results (keyed as the stage flows
describe), so a rerun of the same configuration redoes only what changed or failed, and a
failed training stage resumes from its checkpoint. The per-file and per-chunk maps of ingest
and filter run on threads, or on Dask when ``workers`` > 1 or ``dask_address`` is set.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from flows.corpora import islamic_pairs_flow
from flows.evaluate import eval_flow
from flows.filter import filter_flow
from flows.ingest import ingest_flow
from flows.own_pairs import own_pairs_flow
from flows.runners import task_runner
from flows.train import train_flow
from flows.vocab import vocab_flow
from mosaic_core.config import EvalConfig, PipelineConfig
from storage.lock import root_lock
from tasks.evaluate import write_model_cards
from tasks.publish import decide_and_publish, published_model
from tasks.report import funnel, run_report, story


@flow(name="mosaic_pipeline")
def mosaic_pipeline(cfg: PipelineConfig, data_root: str) -> dict:
    """Run the whole pipeline under ``data_root``; models go to ``data_root/models``, the
    evaluation report to ``data_root/report``. The final model is published
    (``data_root/models/current``) only if the publish gate passes: not worse than the base
    model, nor than the model published now, on the gate tasks."""
    with root_lock(data_root, "mosaic_pipeline flow"):
        root = Path(data_root)
        if cfg.islamic is not None:
            pairs = islamic_pairs_flow(cfg.islamic.quran, cfg.islamic.tafsir,
                                       cfg.islamic.filter_config(cfg.filter.model), data_root)
            ingested, filtered = [], [pairs["manifest"]]
        else:
            ingested = (own_pairs_flow(cfg.pairs, data_root) if cfg.pairs is not None else
                        ingest_flow.with_options(task_runner=task_runner(cfg.workers, cfg.dask_address))(
                            cfg.ingest, data_root))
            filtered = filter_flow.with_options(task_runner=task_runner(cfg.workers, cfg.dask_address))(
                data_root, cfg.filter, data_root)
        stage1 = str(root / "models" / "stage1")
        vocab = vocab_flow(data_root, cfg.vocab, stage1)
        stages = train_flow(stage1, data_root, cfg.train, str(root / "models"))
        tasks = cfg.eval_specs(data_root)
        final = stages[-1]["stage"]
        published = published_model(data_root)
        models = {"base": cfg.base_model, "stage1": stage1, **{s["stage"]: s["out_dir"] for s in stages},
                  **({"published": published} if published else {})}
        # A sparse run scores the base as SPLADE too (on its masked-LM head): like for like.
        eval_cfg = EvalConfig(tasks=tasks, model_kind="sparse" if cfg.model_kind == "sparse" else "auto")
        report = eval_flow(models, eval_cfg, str(root / "report"), data_root)
        write_model_cards({m: p for m, p in models.items() if m != "published"}, report["scores"], "base", cfg.domain)
        decision = decide_and_publish(str(flow_run.id), final, models, report["scores"],
                                      ["base", *(["published"] if published else [])], cfg.gate_tasks(),
                                      cfg.gate.tolerance, data_root, cfg.gate.publish)
        report_paths = run_report(story(
            final, report["scores"], decision=decision, vocab=vocab, stages=stages,
            funnel=funnel(ingested, filtered, stages[0], cfg.train.validation_pairs, cfg.train.heldout_pairs,
                          "pubmed" if cfg.pairs is None else "pairs"),
            task_words={t.name: t.description for t in tasks if t.description},
            metadata={"base model": cfg.base_model, "data root": data_root, "config": cfg.config_hash()}),
            str(root / "report"))
        kept, total = sum(m.kept for m in filtered), sum(m.rows_out for m in filtered)
        create_markdown_artifact(
            key="pipeline-summary",
            markdown=(f"**{kept:,} of {total:,} pairs** kept by the filter; **{vocab['tokens_added']:,} tokens** "
                      f"added; stages {', '.join(s['stage'] for s in stages)}; final model `{stages[-1]['out_dir']}`; "
                      f"{decision['message']}; report `{report_paths['html']}`"),
            description="MOSAIC pipeline run",
        )
        return {"pairs_kept": kept, "pairs": total, "vocab": vocab, "stages": stages, "report": report_paths,
                "scores": report["scores"],
                "final_model": stages[-1]["out_dir"], "decision": decision,
                "published_model": decision["published_path"] or decision["previous"]}
