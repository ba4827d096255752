"""``mosaic run``: the whole pipeline, once (``cli.rebuild`` serves it as the scheduled rebuild)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from cli.common import (DataRoot, DocumentPrompt, InputProblem, QueryPrompt, Wait, _folder, _model, _run, app,
                        check_teachers, console, out_console, parse_sets, prompts_option, raised)
from cli.data import _print_stats
from cli.tracking import MlflowUri, mlflow_tracking, print_tracking
from cli.train import _print_stages


def _pipeline_config(config: Path):
    """The validated pipeline config; exit 2 with the reasons if invalid."""
    import yaml
    from pydantic import ValidationError

    from tasks.config_file import load_pipeline_config

    try:
        return load_pipeline_config(str(config))
    except (OSError, yaml.YAMLError, ValidationError, ValueError) as exc:
        console.print(f"[red]invalid pipeline config {escape(str(config))}:[/red]\n{escape(str(exc))}")
        raise typer.Exit(2) from exc


def _with_prompts(cfg, prompts: dict):
    """``cfg`` with a ``prompts:`` section, as if its YAML had it."""
    from mosaic_core.config import PipelineConfig

    data = cfg.model_dump(mode="json", exclude_defaults=True)
    return PipelineConfig.load({**data, "base_model": cfg.base_model, "prompts": prompts})


def _source_config(source: dict, domain: str | None, base_model: str | None, prompts: dict | None = None):
    """``mosaic run --pairs`` or ``--documents``: the pipeline's defaults around that ``source``
    (its path relative to the working directory); ``base_model`` also filters the pairs."""
    from mosaic_core.config import PipelineConfig
    from tasks.config_file import located

    models = {"base_model": base_model, "filter": {"model": base_model}} if base_model else {}
    return PipelineConfig.load({**models, **({"domain": domain} if domain else {}),
                                **({"prompts": prompts} if prompts is not None else {}),
                                "source": located(source, Path.cwd())})


def _demo_config(root: Path, seed: int):
    """The demo's config for ``root`` before its flow generates the data (to check ``--set`` against)."""
    from mosaic_core.data.demo import demo_pipeline

    return demo_pipeline(seed, str(root / "demo" / "invented-terms"), str(root / "demo" / "glossary.jsonl"))


def _overridden(cfg, sets: dict[str, object]):
    """``cfg`` with ``sets`` applied; exit 2 with the reasons if invalid."""
    from pydantic import ValidationError

    try:
        return cfg.overridden(sets)
    except (ValidationError, ValueError) as exc:
        console.print(f"[red]--set:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc


def _with_sets(cfg, sets: dict[str, object], glossary: str | None, root: Path, seed: int):
    """(``cfg`` with ``sets`` and ``--glossary`` applied, the sets the demo's flow applies): the
    demo's config (``cfg`` None) is checked here and built by its flow, which generates its data
    first; a glossary path is taken from the directory mosaic runs in, as --pairs is."""
    if glossary:
        from storage.sources import is_remote

        sets = {"glossary.path": glossary if is_remote(glossary) else str(Path(glossary).expanduser().resolve()),
                **sets}
    if not sets:
        return cfg, sets
    checked = _overridden(cfg or _demo_config(root, seed), sets)
    if cfg is None and glossary:
        from tasks.glossary_file import check_glossary

        check_glossary(checked.glossary)
    return (checked if cfg is not None else None), sets


def _check_inputs(cfg, config: Path | None, root: Path) -> None:
    """What a run reads, checked before any server starts or any model is looked up: its source's
    files, its evaluation tasks' files and folders, its models, whatever else its source checks
    (own pairs: readable, enough distinct usable pairs for the run) and its glossary file (a
    glossary's columns, or MeSH XML)."""
    from flows.sources import source_hook
    from tasks.glossary_file import check_glossary

    where = f" of {config}" if config else ""
    for name, path in cfg.source.inputs().items():
        if not Path(path).is_file():
            raise InputProblem(f"source.{name}{where}: no file {path} (paths are relative to the "
                               "directory you run mosaic from)")
    for task in cfg.eval_tasks:
        for name, path in task.inputs().items():
            found = Path(path).expanduser()
            if not found.exists() and found.resolve() != root:  # a held-out task may read this run's own root
                raise InputProblem(f"eval_tasks {task.name!r} ({task.kind}){where}: nothing at its {name} {path} "
                                   "(paths are relative to the directory you run mosaic from): fix the path, or "
                                   "drop the task")
    _model(cfg.base_model)
    _model(cfg.filter.model)
    check_teachers(cfg.train.stages)
    if (check := source_hook(cfg.source, "check")) is not None:
        check(cfg.source, cfg)
    if cfg.glossary is not None:
        check_glossary(cfg.glossary)


FullRebuild = Annotated[bool, typer.Option(
    "--full", help="A full rebuild: stage 1 and every training stage over all the pairs, from the base model. Without "
    "it, a rerun that finds new pairs beside the live models of the last run (same configuration) is an update tick: "
    "it trains the live models on the new pairs and a replay of earlier ones (docs/concepts/continual.md).")]


@app.command()
def run(
    data_root: DataRoot = Path("mosaic-demo"),
    config: Annotated[Optional[Path], typer.Option(
        "--config", "-c", help="Pipeline YAML (sections base_model, domain, prompts, source, "
        "filter, vocab, train, eval_tasks, eval_pool, gate, control, export, tracking; see "
        "docs/pipeline.example.yaml). Default: the built-in demo.")] = None,
    seed: Annotated[int, typer.Option(help="Demo only: the seed of the generated domain (its words' meanings "
                                      "and texts).")] = 0,
    pairs: Annotated[Optional[str], typer.Option(
        help="Your own domain instead of a config: a pairs file, folder or glob (JSONL/JSON, Parquet, CSV/TSV, "
        "compressed or not; or a Hugging Face save_to_disk folder), or a hub dataset (hf://datasets/OWNER/NAME), "
        "with the defaults for everything else.")] = None,
    documents: Annotated[Optional[str], typer.Option(
        help="A domain with documents but no pairs: a folder of .txt/.md files (one document each), JSONL/CSV/"
        "Parquet files with a text column (and a title column if any), or a hub dataset; pairs are built from "
        "their passages (titles and inverse cloze by default: --set source.builders=[title,ict,crop]), with the "
        "defaults for everything else (--set source.text_column=body, …).")] = None,
    glossary: Annotated[Optional[str], typer.Option(help=(
        "Definitions of the domain's terms: a JSONL/CSV/TSV of term, definition (synonyms, examples), or MeSH "
        "descriptor XML, a file or an https URL; taught to the adapted model (docs/concepts/glossary.md). The demo "
        "has its own; --set glossary=null: none."))] = None,
    query_column: Annotated[str, typer.Option(help="With --pairs: the query column.")] = "query",
    document_column: Annotated[str, typer.Option(help="With --pairs: the document column.")] = "document",
    domain: Annotated[Optional[str], typer.Option(help="With --pairs or --documents: the domain's name, for the "
                                                  "model cards.")] = None,
    base_model: Annotated[Optional[str], typer.Option(
        help="With --pairs or --documents: the model to adapt, also the filter's model (default "
        "thenlper/gte-base; offline: offline:all-MiniLM-L6-v2).")] = None,
    query_prompt: QueryPrompt = None,
    document_prompt: DocumentPrompt = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", help="Set any config field by its dotted path, after --config or --pairs (or on the demo's "
        "config): --set train.heldout_pairs=500 --set source.path=more.jsonl --set train.stages.0.max_steps=200; "
        "the value is read as YAML (3, 0.5, true, [a, b], null). A new source.kind starts that source from its "
        "defaults; the sections and fields are in the configuration reference (docs/reference/config.md).")] = None,
    full: FullRebuild = False,
    mlflow_uri: MlflowUri = None,
    wait: Wait = None,
) -> None:
    """Run the whole pipeline: ingest → filter → vocab → train stages → evaluation → publish gate.

    With no --config it runs the built-in demo: a generated snapshot of an invented biomedical
    sub-field (two dozen made-up drug and protein names) with the offline all-MiniLM-L6-v2 on
    CPU (a few minutes), ending with an adapted model, plain fine-tuning of the base beside it
    (the control; the better of the two on the validation pairs is published), and a report under
    DATA_ROOT that compares them with the base model on the held-out pairs and on finding
    documents about the invented words from a description of what they do. Rerunning takes
    completed steps from cache and resumes a failed training stage; ^C or SIGTERM stops a run
    within seconds, keeping every finished step.
    """
    root = Path(_folder(data_root))
    if sum(map(bool, (pairs, documents, config))) > 1:
        raise InputProblem("--pairs, --documents and --config each name the run's source: give one (a config's "
                           "source: section does what --pairs or --documents does)")
    prompts = prompts_option(query_prompt, document_prompt)
    source = ({"kind": "pairs", "path": pairs, "query_column": query_column, "document_column": document_column}
              if pairs else {"kind": "documents", "path": documents} if documents else None)
    cfg = _pipeline_config(config) if config else _source_config(source, domain, base_model, prompts) if source \
        else None
    if prompts is not None and (cfg is None or (config and cfg.prompts is not None)):
        raise InputProblem("--query-prompt/--document-prompt go with --pairs or --documents, or with a --config "
                           "that has no prompts: section (set them in one place)")
    if prompts is not None and config:
        cfg = _with_prompts(cfg, prompts)
    cfg, sets = _with_sets(cfg, parse_sets(set_ or []), glossary, root, seed)
    if cfg is not None:
        _check_inputs(cfg, config, root)
    tracking = mlflow_tracking(mlflow_uri, cfg.tracking if cfg is not None else None)
    if cfg is not None and tracking is not None:
        cfg = cfg.model_copy(update={"tracking": tracking})
    flow = (("flows.pipeline:mosaic_pipeline", cfg, str(root), full) if cfg is not None else
            ("flows.demo:demo_flow", str(root), seed, tracking, sets or None, full))
    _print_run(_run_pipeline(flow, root, wait), root, tracking or (cfg.tracking if cfg is not None else None))


def _run_pipeline(flow: tuple, root: Path, wait) -> dict:
    """The pipeline run ``flow`` (the flow, then its arguments) writing ``root``; an ingest that
    failed on bad files shows the ingest's counts and exits 1."""
    try:
        return _run(*flow, writes=root, wait=wait)
    except Exception as exc:
        if not raised(exc, "flows.ingest:IngestFailed"):
            raise
        _print_stats(root)
        console.print(f"[red]ingest failed:[/red] {escape(str(exc))}\n"
                      "Fix the files named above and run the same command again.")
        raise typer.Exit(1) from exc


def _print_run(result: dict, root: Path, tracking) -> None:
    """What a pipeline run did: the filter, stage 1, the stage table, the report's summary, the
    models and the decision."""
    out = out_console()
    out.print(f"{result['tick']['words']}")
    out.print(f"filter: kept {result['pairs_kept']} of {result['pairs']} pairs; "
              f"stage 1 added {result['vocab']['tokens_added']} tokens")
    _print_stages(result["stages"], paths=False)
    out.print(Path(result["report"]["markdown"]).read_text().split("![")[0].rstrip().removesuffix("## Charts"))
    out.print(f"[green]adapted model:[/green] {result['final_model']}")
    decision = result["decision"]
    out.print(f"[{'green' if decision['published'] else 'yellow'}]{decision['message']}[/]")
    out.print(f"[green]published model:[/green] {result['published_model'] or 'none yet'}")
    out.print(f"[green]report:[/green] {result['report']['html']}")
    print_tracking(out, root, tracking)

