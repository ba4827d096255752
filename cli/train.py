"""``mosaic train``: stages 2-3, and the stage table ``mosaic run`` prints too."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from cli.common import (
    DocumentPrompt,
    QueryPrompt,
    Wait,
    _folder,
    _model,
    _run,
    app,
    check_teachers,
    out_console,
    prompts_option,
)
from cli.tracking import MlflowUri, mlflow_tracking, print_tracking
from mosaic_core.config import StageConfig, TrainConfig


def parse_overrides(items: list[str]) -> tuple[dict, dict[str, dict]]:
    """``key=value`` (every stage) and ``stage.key=value`` (one stage) → (common, per stage)."""
    common: dict = {}
    per_stage: dict[str, dict] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"{item!r}: expected key=value or stage.key=value")
        parsed = None if value.lower() in ("none", "null") else value
        stage, dot, field = key.rpartition(".")
        (per_stage.setdefault(stage, {}) if dot else common)[field] = parsed
    return common, per_stage


def build_train_config(preset: str, overrides: list[str], query_column: str, document_column: str,
                       prompts: dict | None = None, **run: object) -> TrainConfig:
    """The preset's stages with ``--set`` overrides and ``prompts`` (every stage); exit 2 if invalid."""
    common, per_stage = parse_overrides(overrides)
    if prompts is not None:
        common["prompts"] = prompts
    # a field of the run, not of a stage (mlm_warmup=off, validation_pool=…, negative_rule.margin=…)
    run_fields = set(TrainConfig.model_fields) - set(StageConfig.model_fields) - {"stages"}
    run = {**run, **{k: common.pop(k) for k in list(common) if k in run_fields},
           **{k: per_stage.pop(k) for k in list(per_stage) if k in run_fields}}
    try:
        return TrainConfig.preset(preset, common, per_stage, query_column=query_column,
                                  document_column=document_column, **run)
    except ValueError as exc:  # pydantic's ValidationError included
        raise typer.BadParameter(str(exc)) from exc


@app.command()
def train(
    model: Annotated[str, typer.Option(help="Input model: a `mosaic vocab` output (needed for domain-token "
                                       "MLM), any local model directory or a hub id.")],
    pairs: Annotated[str, typer.Option(help="Training pairs: a MOSAIC data root (its filtered pairs), a "
                                       "pairs file (.jsonl/.parquet/.csv), or an examples file a run wrote "
                                       "(.arrow, e.g. OUT/hard_negatives-<stage>.arrow).")],
    out: Annotated[Path, typer.Option(help="Output root; stage N (from 1) writes OUT/N-NAME, NAME the stage's name.")],
    preset: Annotated[str, typer.Option(help="Stage list: paper (joint, contrastive), warmup (mlm, joint, "
                                        "contrastive), alpha-0.1..0.5, all-token, mask-0.3, reversed, "
                                        "contrastive-only, multistage (general contrastive, then joint "
                                        "and contrastive on the domain). Each domain stage trains 80 steps "
                                        "of 32 pairs with one hard negative (the budget curve's choice; "
                                        "--set max_steps=N, or --set epochs=N for whole passes).")] = "paper",
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", help="Override a stage field: key=value for every stage, stage.key=value for one "
        "(e.g. --set batch_size=256 --set chunk_size=32 --set joint.max_steps=1000); a field of the run "
        "the same way (--set mlm_warmup=off trains the preset's stages as given).")] = None,
    heldout_pairs: Annotated[int, typer.Option(help="Test pairs held out of training (what `mosaic eval "
                                               "--heldout` scores).")] = 256,
    validation_pairs: Annotated[int, typer.Option(help="Further pairs held out: each stage scores them every "
                                                  "eval_every steps and keeps its best model.")] = 256,
    merge: Annotated[Optional[list[float]], typer.Option(
        help="WiSE-FT merge step: interpolate the last stage with the input model at this weight (repeatable; the "
        "best on the validation pairs wins, 1.0 = no merge competes).")] = None,
    query_column: Annotated[str, typer.Option(help="Query column of a pairs file.")] = "query",
    document_column: Annotated[str, typer.Option(help="Document column of a pairs file.")] = "document",
    processes: Annotated[Optional[int], typer.Option(help="Data-parallel processes via torchrun "
                                                     "(default: one per visible GPU, else 1).")] = None,
    model_kind: Annotated[str, typer.Option(
        help="sparse: train SPLADE (the MLM head's max-pooled log(1+ReLU) logits, dot-product InfoNCE + FLOPS "
        "regulariser) in every stage and save SparseEncoder models.")] = "dense",
    query_prompt: QueryPrompt = None,
    document_prompt: DocumentPrompt = None,
    mlflow_uri: MlflowUri = None,
    wait: Wait = None,
) -> None:
    """Stages 2-3: joint domain-restricted MLM + contrastive, then contrastive only (or a preset).

    Each stage saves a model that SentenceTransformer/AutoModel load directly; with eval_every
    set, the model of its best validation NDCG@10. Completed stages come from cache on a rerun;
    an interrupted stage resumes from its last checkpoint. Hard negatives (the presets use one per
    pair; --set hard_negatives=N) come from the consistency filter, or are mined once with the input
    model when a pairs file has none (--set hard_negatives=0 skips that).
    """
    cfg = build_train_config(preset, [f"model_kind={model_kind}", *(set_ or [])], query_column, document_column,
                             heldout_pairs=heldout_pairs, prompts=prompts_option(query_prompt, document_prompt),
                             validation_pairs=validation_pairs, merge_weights=tuple(merge or ()))
    from storage.pairs_io import check_pairs_source

    check_pairs_source(pairs, (query_column, document_column), "--pairs")
    check_teachers(cfg.stages)
    out_root = _folder(out, "--out")
    tracking = mlflow_tracking(mlflow_uri)
    results = _run("flows.train:train_flow", _model(model), pairs, cfg, out_root, processes, tracking,
                   writes=out_root, wait=wait)
    _print_stages(results)
    print_tracking(out_console(), Path(out_root), tracking)


def _print_stages(results: list[dict], paths: bool = True) -> None:
    """The stages' summary table; without ``paths`` (``mosaic run``, which names its final model)
    it leaves out the model folders, so that it fits a terminal."""
    from flows.train import stage_rows

    rows = [r if paths else {k: v for k, v in r.items() if k != "model"} for r in stage_rows(results)]
    table = Table(title="Training stages")
    for col in rows[0] if rows else ():
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*("–" if v is None else str(v) for v in row.values()))
    out_console().print(table)
