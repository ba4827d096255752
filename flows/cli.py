"""The ``mosaic`` command line: each subcommand loads its config once and runs a flow."""

from __future__ import annotations

import contextlib
import math
import os

# Before Prefect is imported: no telemetry from an offline machine.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# The temporary local API server needs more than Prefect's default 20 s on a 2-core machine.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

from pathlib import Path  # noqa: E402
from typing import Annotated, Optional  # noqa: E402

import typer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from mosaic_core.config import (  # noqa: E402
    NCBI_PUBMED_URL,
    DistillConfig,
    FilterConfig,
    IngestConfig,
    IslamicConfig,
    PairConfig,
    TrainConfig,
    VocabConfig,
)
from deployments import DEFAULT_CRON  # noqa: E402
from flows.runners import task_runner  # noqa: E402
from mosaic_core.models import OFFLINE_MODEL  # noqa: E402

app = typer.Typer(
    name="mosaic",
    help="Adapt a general text-embedding model to a domain: PubMed snapshots in, adapted model out.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",  # docstring paragraphs reflow to the terminal
)
console = Console(stderr=True)

DataRoot = Annotated[
    Path,
    typer.Option(
        "--data-root",
        "-d",
        envvar="MOSAIC_DATA_ROOT",
        help="Where partitions, manifests, the DuckDB catalog and cached results live.",
    ),
]
DEFAULT_ROOT = Path("mosaic-data")
Wait = Annotated[
    Optional[float],
    typer.Option(
        "--wait",
        metavar="[SECONDS]",
        help="If another command is writing the same data root: wait up to SECONDS for it to finish (`--wait` "
        "alone: as long as it takes). Default: exit at once, with code 3, naming the command that holds it.",
    ),
]


class InputProblem(ValueError):
    """A command's input is wrong; the message says what to pass instead."""


def _folder(path: Path, what: str = "data root") -> str:
    """``path`` resolved, after checking it is not a file (a folder that does not exist yet is fine)."""
    resolved = path.expanduser().resolve()
    if resolved.exists() and not resolved.is_dir():
        raise InputProblem(f"{what} {path} is a file: pass a folder (it is created if missing)")
    return str(resolved)


def _model(name: str) -> str:
    """``name`` unchanged, after checking it can be loaded (before any flow starts)."""
    from mosaic_core.models import check_model

    check_model(name)
    return name


@app.command()
def ingest(
    source: Annotated[
        str,
        typer.Option(
            "--source",
            "-s",
            help="Local directory or glob of *.xml/*.xml.gz, or an HTTP(S) base laid out like "
            "NCBI's pubmed/ (baseline/ and updatefiles/ listings with .md5 sidecars).",
        ),
    ] = NCBI_PUBMED_URL,
    data_root: DataRoot = DEFAULT_ROOT,
    subset: Annotated[
        Optional[list[str]],
        typer.Option(help="Remote/mirrored subsets to take: baseline, updatefiles (repeatable)."),
    ] = None,
    max_files: Annotated[Optional[int], typer.Option(help="Take only the first N files.")] = None,
    min_title_words: Annotated[int, typer.Option(help="Drop titles shorter than this.")] = 4,
    min_abstract_words: Annotated[int, typer.Option(help="Drop abstracts shorter than this.")] = 30,
    language: Annotated[
        Optional[list[str]], typer.Option(help="ISO 639-1 language(s) to keep (repeatable).")
    ] = None,
    no_journal: Annotated[bool, typer.Option(help="Do not append the journal to the query.")] = False,
    no_keywords: Annotated[bool, typer.Option(help="Do not append keywords to the query.")] = False,
    label_sections: Annotated[
        bool, typer.Option(help="Prefix structured-abstract sections with their LABEL.")
    ] = False,
    workers: Annotated[
        int, typer.Option(help="Parse files in N worker processes (local Dask cluster).")
    ] = 1,
    dask_address: Annotated[
        Optional[str], typer.Option(help="Run the per-file tasks on this Dask scheduler.")
    ] = None,
    wait: Wait = None,
) -> None:
    """Parse a PubMed snapshot into (title, abstract) pairs in Parquet.

    Reruns process only new, changed or failed files; everything else comes from cache.
    """
    pairs = PairConfig(
        append_journal=not no_journal,
        append_keywords=not no_keywords,
        prefix_abstract_labels=label_sections,
        min_title_words=min_title_words,
        min_abstract_words=min_abstract_words,
        keep_languages=tuple(language or ("en",)),
    )
    cfg = IngestConfig(
        source=source,
        subsets=tuple(subset or ("baseline", "updatefiles")),
        max_files=max_files,
        pairs=pairs,
    )
    _run_ingest(cfg, data_root, workers, dask_address, wait)


def _run_ingest(cfg: IngestConfig, data_root: Path, workers: int, dask_address: str | None, wait: float | None):
    from flows.ingest import IngestFailed, ingest_flow

    root = _folder(data_root)
    flow = ingest_flow.with_options(task_runner=task_runner(workers, dask_address))
    try:
        _run(flow, cfg, root, writes=root, wait=wait)
    except IngestFailed as exc:
        _print_stats(Path(root))
        console.print(f"[red]ingest failed:[/red] {escape(str(exc))}")
        console.print("Fix or re-fetch the files named above and run the same command again: "
                      "completed files come from cache.")
        raise typer.Exit(1) from exc
    _print_stats(Path(root))


@app.command()
def stats(data_root: DataRoot = DEFAULT_ROOT) -> None:
    """Counts per source file and per drop reason, from the DuckDB catalog."""
    if not data_root.exists():
        console.print(f"[red]{data_root} does not exist[/red]: run `mosaic ingest` first.")
        raise typer.Exit(2)
    _print_stats(data_root)


def _print_stats(data_root: Path) -> None:
    from storage.catalog import Catalog
    from storage.layout import DataLayout

    out = Console()
    with Catalog(DataLayout(data_root)) as cat:
        cat.refresh()
        files = Table(title="Ingested files")
        for col in ("file", "status", "records", "kept", "dropped", "deleted PMIDs", "error"):
            files.add_column(col, justify="right" if col in ("records", "kept", "dropped", "deleted PMIDs") else "left",
                             no_wrap=col == "file")
        for part, status, rec, kept, dropped, deleted, error in cat.file_stats():
            style = "red" if status != "complete" else None
            files.add_row(part, status, str(rec), str(kept), str(dropped), str(deleted),
                          (error or "")[:80], style=style)
        out.print(files)
        reasons = Table(title="Dropped records by reason")
        reasons.add_column("reason")
        reasons.add_column("count", justify="right")
        for reason, n in cat.drop_reasons():
            reasons.add_row(reason, str(n))
        out.print(reasons)
        totals = cat.totals()
        out.print(
            f"latest citations: {totals['latest_citations']}  ·  pairs passing the ingest filters: "
            f"{totals['latest_pairs']}  ·  deleted PMIDs: {totals['deleted_pmids']}  ·  "
            f"catalog: {cat.layout.catalog_path}"
        )


@app.command(name="filter")
def filter_pairs(
    input: Annotated[
        str,
        typer.Option("--input", "-i", help="A MOSAIC data root (its latest ingested pairs) or a pairs file "
                     "(.jsonl/.parquet/.csv)."),
    ],
    data_root: DataRoot = DEFAULT_ROOT,
    model: Annotated[str, typer.Option(help=f"Filter model: hub id, local path, or {OFFLINE_MODEL}.")]
    = "thenlper/gte-base",
    k: Annotated[int, typer.Option(help="Keep a pair iff its own document is in its query's top k.")] = 2,
    threshold: Annotated[
        Optional[float], typer.Option(help="Threshold mode instead: keep pairs with cosine >= this.")
    ] = None,
    chunk_size: Annotated[int, typer.Option(help="Pairs per exact search (one index).")] = 1_000_000,
    precision: Annotated[str, typer.Option(help="auto, fp32, bf16 or fp16 (CUDA).")] = "auto",
    batch_tokens: Annotated[Optional[int], typer.Option(
        help="Padded tokens per encoding batch (default: 131,072 on CUDA; 64 texts a batch on CPU).")] = None,
    query_column: Annotated[str, typer.Option(help="Query column of a pairs file.")] = "query",
    document_column: Annotated[str, typer.Option(help="Document column of a pairs file.")] = "document",
    wait: Wait = None,
) -> None:
    """Consistency-filter candidate pairs (or threshold-filter them, for small domains).

    Embeddings are cached per partition, so a new k or threshold re-filters without re-encoding.
    Results: the `filtered` dataset and `training_pairs` view of the data root's catalog.
    """
    from flows.filter import filter_flow
    from storage.pairs_io import check_pairs_source
    from tasks.filter import score_report

    cfg = FilterConfig(model=model, mode="threshold" if threshold is not None else "consistency", k=k,
                       threshold=threshold, chunk_size=chunk_size, precision=precision, batch_tokens=batch_tokens,
                       query_column=query_column, document_column=document_column)
    check_pairs_source(input, (query_column, document_column), "--input")
    _model(model)
    root = _folder(data_root)
    manifests = _run(filter_flow, input, cfg, root, writes=root, wait=wait)
    Console().print(score_report.fn(root))
    table = Table(title=f"{cfg.mode} filter")
    for col in ("partition", "pairs", "kept", "kept %", "bad rows"):
        table.add_column(col)
    for m in manifests:
        bad = sum(v for key, v in m.dropped.items() if key not in ("inconsistent", "below_threshold"))
        table.add_row(m.partition, str(m.rows_out), str(m.kept), f"{100 * m.kept / max(m.rows_out, 1):.1f}",
                      str(bad))
    Console().print(table)


pairs_app = typer.Typer(help="Build candidate pairs for domains without PubMed-style metadata.",
                        no_args_is_help=True, rich_markup_mode="markdown")
app.add_typer(pairs_app, name="pairs")


@pairs_app.command("islamic")
def pairs_islamic(
    quran: Annotated[Path, typer.Option(help="Sahih International translation, 'sura|aya|text' lines.")],
    tafsir: Annotated[Path, typer.Option(help="Tafsir Ibn Kathir blocks, JSONL {id, surah, ayah_start, "
                                          "ayah_end, text} with inline (x:y) / (x:y-z) references.")],
    data_root: DataRoot = Path("mosaic-islamic"),
    model: Annotated[str, typer.Option(help=f"Scoring model: hub id, local path, or {OFFLINE_MODEL}.")]
    = "thenlper/gte-base",
    threshold: Annotated[float, typer.Option(help="Keep candidates with cosine >= this.")] = 0.5,
    wait: Wait = None,
) -> None:
    """Verse pairs linked by Tafsir cross-references, threshold-filtered (the low-resource recipe).

    Writes DATA_ROOT/islamic_candidates.jsonl, then filters it like `mosaic filter --threshold`.
    """
    from flows.corpora import islamic_pairs_flow

    cfg = IslamicConfig(quran=str(quran), tafsir=str(tafsir), threshold=threshold).filter_config(_model(model))
    root = _folder(data_root)
    result = _run(islamic_pairs_flow, str(quran), str(tafsir), cfg, root, writes=root, wait=wait)
    stats, manifest = result["stats"], result["manifest"]
    out = Console()
    out.print(f"tafsir blocks {stats['blocks']:,}; references {stats['references']:,} "
              f"({stats['invalid_references']} to verses that do not exist: {stats['invalid_examples'][:3]}); "
              f"self-links {stats['self_links']}; duplicates {stats['duplicates']}; "
              f"[bold]candidates {stats['candidates']:,}[/bold]")
    out.print(result["scores"])
    out.print(f"[bold]kept {manifest.kept:,} of {manifest.rows_out:,}[/bold] at cosine >= {threshold}")
    for pid, cos, q, d in result["dropped"]:
        out.print(f"dropped {pid} (cos {cos:.3f}): {q[:80]!r} -> {d[:80]!r}")


@app.command()
def vocab(
    corpus: Annotated[
        str,
        typer.Option(help="A MOSAIC data root (its latest pairs) or a pairs file (.jsonl/.parquet/.csv "
                     "with query and document columns)."),
    ],
    out: Annotated[Path, typer.Option(help="Directory for the expanded model, V_D and the report.")],
    base_model: Annotated[
        str, typer.Option(help=f"Hub id, local path, or {OFFLINE_MODEL} (offline default).")
    ] = "thenlper/gte-base",
    vocab_size: Annotated[
        Optional[int], typer.Option(help="Domain tokenizer size (default: the base vocabulary's).")
    ] = None,
    min_frequency: Annotated[int, typer.Option(help="Minimum corpus frequency of a domain-tokenizer token.")] = 2,
    min_count: Annotated[int, typer.Option(help="Add a token only if the expanded tokenizer uses it at least this "
                                           "often in the corpus.")] = VocabConfig().min_count,
    max_tokens: Annotated[Optional[int], typer.Option(help="Add at most this many tokens (the most saving).")] = None,
    init: Annotated[str, typer.Option(help="New rows: 'distill' (mean of pieces, then trained to reproduce the base "
                                      "model's embeddings) or 'mean'.")] = "distill",
    distill_target: Annotated[str, typer.Option(help="Distillation target: pooled, tokens or both.")] = "pooled",
    distill_steps: Annotated[Optional[int], typer.Option(help="Distillation steps at most (default: "
                                                         f"{DistillConfig().max_steps}, or one pass over the corpus if "
                                                         "shorter; held-out texts stop it earlier).")] = None,
    distill_lr: Annotated[float, typer.Option(help="Adam learning rate of the distilled rows.")] = DistillConfig().lr,
    distill_seed: Annotated[int, typer.Option(help="Seed of the distillation's data order (scores move with it: "
                                              "docs/benchmarks.md measures two).")] = DistillConfig().seed,
    distill_contexts: Annotated[str, typer.Option(
        help="What the rows learn from: 'sentences' (up to --distill-per-token sentences drawn for each new "
        "token, so rare tokens train as much as frequent ones) or 'texts' (the corpus texts as they come).")
    ] = DistillConfig().contexts,
    distill_per_token: Annotated[int, typer.Option(
        help="With --distill-contexts sentences: sentences drawn per new token.")] = DistillConfig().per_token,
    prune: Annotated[float, typer.Option(
        help="Once the rows are initialised, drop this share (0 to <1; 0 keeps every token) of the added tokens: "
        "those whose rows still move embeddings the most per base piece they save, measured on training "
        "sentences. The report tabulates 10-50 %.")] = VocabConfig().prune,
    prune_sentences: Annotated[int, typer.Option(
        help="With --prune: training sentences per token its cost is measured on.")] = VocabConfig().prune_sentences,
    columns: Annotated[
        Optional[list[str]], typer.Option(help="Text columns of a pairs file (repeatable).")
    ] = None,
    reduce_to_corpus: Annotated[
        Optional[str], typer.Option(help="First keep only the base vocabulary rows this corpus (pairs file or "
                                    "data root) uses, plus specials and single characters (seed 004).")
    ] = None,
    model_kind: Annotated[str, typer.Option(
        help="sparse: write a SPLADE SparseEncoder, the new rows also new output dimensions of the MLM head.")
    ] = "dense",
) -> None:
    """Stage 1: train a domain tokenizer and add its useful new tokens to the base model.

    The domain tokenizer is of the base's kind (WordPiece for BERT, byte-level BPE for
    RoBERTa/GPT-2, Unigram for XLM-R); of its tokens, those the corpus uses at least
    --min-count times and that shorten the words they appear in go into the base tokenizer's
    model, so they are used mid-word too. New rows start as the mean of their pieces and are
    then distilled: trained, alone, so the expanded model reproduces the base model's
    embeddings of the corpus; then the --prune share of the tokens whose rows still cost the
    most is dropped. Writes a model that SentenceTransformer/AutoModel load directly,
    domain_token_ids.json (V_D) and vocab_report.{json,md} (tokens added and rejected, the
    trade-off per threshold and per pruned share, fertility, drift before/after distillation
    and pruning).
    """
    from pydantic import ValidationError

    from flows.vocab import vocab_flow

    try:
        cfg = VocabConfig(base_model=base_model, vocab_size=vocab_size, min_frequency=min_frequency,
                          min_count=min_count, max_tokens=max_tokens, init=init, prune=prune,
                          prune_sentences=prune_sentences,
                          distill={"target": distill_target, "lr": distill_lr, "seed": distill_seed,
                                   "contexts": distill_contexts, "per_token": distill_per_token,
                                   **({"max_steps": distill_steps} if distill_steps else {})},
                          text_columns=tuple(columns or ("query", "document")), reduce_to_corpus=reduce_to_corpus,
                          model_kind=model_kind)
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    from mosaic_core.modeldir import vocab_report_markdown

    from storage.pairs_io import check_pairs_source

    check_pairs_source(corpus, cfg.text_columns, "--corpus")
    if reduce_to_corpus:
        check_pairs_source(reduce_to_corpus, cfg.text_columns, "--reduce-to-corpus")
    _model(base_model)
    report = _run(vocab_flow, corpus, cfg, _folder(out, "--out"))
    Console().print(vocab_report_markdown(out) or report)


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
                       **run: object) -> TrainConfig:

    common, per_stage = parse_overrides(overrides)
    try:
        return TrainConfig.preset(preset, common, per_stage, query_column=query_column,
                                  document_column=document_column, **run)
    except ValueError as exc:  # pydantic's ValidationError included
        raise typer.BadParameter(str(exc)) from exc


@app.command()
def train(
    model: Annotated[str, typer.Option(help="Input model: a `mosaic vocab` output (needed for domain-token "
                                       "MLM), any local model directory or a hub id.")],
    pairs: Annotated[str, typer.Option(help="Training pairs: a MOSAIC data root (its filtered pairs) or a "
                                       "pairs file (.jsonl/.parquet/.csv).")],
    out: Annotated[Path, typer.Option(help="Output root; stage i writes OUT/<i>-<name>.")],
    preset: Annotated[str, typer.Option(help="Stage list: paper (joint, contrastive), warmup (mlm, joint, "
                                        "contrastive), alpha-0.1..0.5, all-token, mask-0.3, reversed, "
                                        "contrastive-only.")] = "paper",
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", help="Override a stage field: key=value for every stage, stage.key=value for one "
        "(e.g. --set batch_size=256 --set chunk_size=32 --set joint.max_steps=1000).")] = None,
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
    wait: Wait = None,
) -> None:
    """Stages 2-3: joint domain-restricted MLM + contrastive, then contrastive only (or a preset).

    Each stage saves a model that SentenceTransformer/AutoModel load directly; with eval_every
    set, the model of its best validation NDCG@10. Completed stages come from cache on a rerun;
    an interrupted stage resumes from its last checkpoint. Hard negatives (--set
    hard_negatives=N) come from the consistency filter, or are mined when a pairs file has none.
    """
    from flows.train import train_flow

    cfg = build_train_config(preset, [f"model_kind={model_kind}", *(set_ or [])], query_column, document_column,
                             heldout_pairs=heldout_pairs,
                             validation_pairs=validation_pairs, merge_weights=tuple(merge or ()))
    from storage.pairs_io import check_pairs_source

    check_pairs_source(pairs, (query_column, document_column), "--pairs")
    out_root = _folder(out, "--out")
    results = _run(train_flow, _model(model), pairs, cfg, out_root, processes, writes=out_root, wait=wait)
    _print_stages(results)


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
    Console().print(table)


def parse_models(items: list[str]) -> dict[str, str]:
    """``NAME=PATH`` or ``PATH`` (named after its folder) → {name: path}, names unique."""
    models: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = Path(item).name or item, item
        if name in models:
            raise typer.BadParameter(f"two models named {name!r}: use NAME=PATH")
        models[name] = path
    return models


@app.command(name="eval")
def eval_models(
    model: Annotated[list[str], typer.Option(help="Model to score: NAME=PATH or PATH (a hub id, a local model, "
                                             f"{OFFLINE_MODEL}); repeat to compare.")],
    out: Annotated[Path, typer.Option(help="Report folder: report.md, report.html, scores.png, "
                                      "ndcg_boxplot.png, results.json.")],
    task: Annotated[Optional[list[str]], typer.Option(
        help="mteb task by name (repeatable), e.g. BIOSSES, SciFact, NFCorpus; 'medical' = the paper's subset. "
        "Data comes from the Hugging Face hub or its local cache.")] = None,
    beir: Annotated[Optional[list[Path]], typer.Option(
        help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) as a retrieval task.")] = None,
    sts: Annotated[Optional[list[Path]], typer.Option(
        help="STS file (.jsonl/.csv/.tsv with sentence1, sentence2, score): Spearman of cosine.")] = None,
    heldout: Annotated[Optional[str], typer.Option(
        help="Pairs source (data root or pairs file) of the training run: its held-out queries retrieved "
        "over held-out documents plus a pool of training documents.")] = None,
    verses: Annotated[Optional[str], typer.Option(
        help="Islamic verse pairs (data root or pairs file of `mosaic pairs islamic`) of the training run: its "
        "held-out Tafsir links as verse-to-verse retrieval over every verse of --quran.")] = None,
    quran: Annotated[Optional[Path], typer.Option(
        help="With --verses: the Sahih International translation, 'sura|aya|text' lines.")] = None,
    heldout_pairs: Annotated[int, typer.Option(help="Held-out pairs (as in `mosaic train`).")] = 256,
    query_column: Annotated[str, typer.Option(help="Query column of a --heldout/--verses pairs file.")] = "query",
    document_column: Annotated[str, typer.Option(help="Document column of a --heldout/--verses pairs file.")
                               ] = "document",
    pool: Annotated[int, typer.Option(help="Distractor documents in the held-out task.")] = 10_000,
    data_root: Annotated[Optional[Path], typer.Option(
        "--data-root", "-d", envvar="MOSAIC_DATA_ROOT",
        help="Record the scores in this data root's catalog (see `mosaic history`).")] = None,
    skip_unavailable: Annotated[bool, typer.Option(
        help="Report tasks whose data is missing and score the rest (default: stop before scoring).")] = False,
    model_kind: Annotated[str, typer.Option(
        help="auto: SparseEncoder models are scored as SPLADE, others as dense; sparse: every model as SPLADE on "
        "its masked-LM head (e.g. a plain BERT checkpoint).")] = "auto",
) -> None:
    """Score models on mteb tasks and local benchmark files; write a comparison report."""
    from flows.evaluate import EvaluationInputError, eval_flow
    from mosaic_core.config import EvalConfig, EvalTaskSpec
    from mosaic_core.evaluation import MEDICAL_TASKS

    names = [t for name in task or [] for t in (MEDICAL_TASKS if name == "medical" else (name,))]
    specs = [EvalTaskSpec(kind="mteb", name=n) for n in names]
    specs += [EvalTaskSpec(kind="beir", name=p.expanduser().resolve().name, path=str(p)) for p in beir or []]
    specs += [EvalTaskSpec(kind="sts", name=p.stem, path=str(p)) for p in sts or []]
    if heldout:
        specs.append(EvalTaskSpec(kind="heldout", name="heldout", path=heldout, heldout_pairs=heldout_pairs,
                                  pool=pool, query_column=query_column, document_column=document_column))
    if verses:
        if not quran:
            raise typer.BadParameter("--verses needs --quran (the verse collection)")
        specs.append(EvalTaskSpec(kind="verses", name="verses", path=verses, collection=str(quran),
                                  heldout_pairs=heldout_pairs, query_column=query_column,
                                  document_column=document_column))
    if not specs:
        raise typer.BadParameter("no task: give --task, --beir, --sts, --heldout or --verses")
    if model_kind not in ("auto", "dense", "sparse"):
        raise typer.BadParameter(f"--model-kind {model_kind!r}: choose auto, dense or sparse")
    cfg = EvalConfig(tasks=tuple(specs), skip_unavailable=skip_unavailable, model_kind=model_kind)
    try:
        models = {name: _model(path) for name, path in parse_models(model).items()}
        result = _run(eval_flow, models, cfg, _folder(out, "--out"), _folder(data_root) if data_root else None)
    except EvaluationInputError as exc:
        console.print(str(exc), style="red", markup=False)
        raise typer.Exit(2) from exc
    Console().print(Path(result["report"]["markdown"]).read_text().split("![")[0])
    Console().print(f"[green]report:[/green] {result['report']['html']}")


@app.command()
def diagnose(
    term: Annotated[str, typer.Argument(help="The word or phrase to inspect, e.g. cardiomyopathy.")],
    model: Annotated[str, typer.Option(help="Model to inspect: a stage output (its trained MLM head is used), "
                                       "any local model or hub id.")],
    base_model: Annotated[Optional[str], typer.Option(
        help="Base model whose tokenizer split is shown beside the adapted one.")] = None,
    corpus: Annotated[Optional[str], typer.Option(
        help="Pairs file or data root: sentences containing TERM are masked and scored.")] = None,
    text: Annotated[Optional[list[str]], typer.Option(help="A sentence containing TERM (repeatable).")] = None,
    columns: Annotated[Optional[list[str]], typer.Option(help="Text columns of a --corpus pairs file.")] = None,
    max_sentences: Annotated[int, typer.Option(help="Sentences scored at most.")] = 20,
    neighbours: Annotated[int, typer.Option(help="Nearest embedding rows shown.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print the diagnosis as JSON.")] = False,
) -> None:
    """Has the model acquired TERM? Tokenizer splits, MLM logit and rank where it occurs, neighbours.

    Each piece of TERM is masked in turn in sentences that contain it and ranked against the
    whole vocabulary by the model's MLM head (rank 1 = its top prediction); the nearest
    neighbours are by cosine over the input embedding matrix (seed 003's diagnostic).
    """
    from mosaic_core.diagnose import diagnose_term, term_sentences
    from storage.pairs_io import corpus_texts

    texts = list(text or [])
    if corpus:
        texts += corpus_texts(corpus, tuple(columns or ("query", "document")))
    sentences = term_sentences(texts, term, max_sentences)
    if (text or corpus) and not sentences:
        console.print(f"[yellow]{term!r} occurs in none of the given texts: no MLM scores[/yellow]")
    result = diagnose_term(model, term, sentences, base_model, neighbours)
    print(result.to_json() if as_json else result.to_text())


@app.command()
def probe(
    model: Annotated[list[str], typer.Option(help="Model to probe: NAME=PATH or PATH; repeat to compare "
                                             "(e.g. base and adapted).")],
    out: Annotated[Path, typer.Option(help="Folder for the probe data, its adaptation corpus and the report.")],
    word: Annotated[str, typer.Option(help="The invented word (letters only).")] = "quorvane",
) -> None:
    """Invented-term probe: are documents naming a made-up word retrieved by queries that only
    describe its meaning?

    Writes OUT/adaptation_pairs.jsonl (definition-style pairs that teach the word: adapt a
    model on them with `mosaic vocab` and `mosaic train`), OUT/probe (a BEIR folder: documents
    that use the word without defining it, distractors, concept-only documents; queries that
    never name it) and scores every model on it (OUT/report).
    """
    from flows.corpora import probe_flow

    if not word.isalpha():
        raise typer.BadParameter(f"the invented word must be letters only, got {word!r}")
    models = {name: _model(path) for name, path in parse_models(model).items()}
    result = _run(probe_flow, models, word, _folder(out, "--out"))
    table = Table(title=f"documents naming {result['word']!r}, queries that only describe it")
    for col in ("model", "NDCG@10", "recall@5", "MRR@10"):
        table.add_column(col)
    for name, (score,) in result["scores"].items():
        s = score["scores"]
        table.add_row(name, f"{score['value']:.3f}", f"{s.get('recall_at_5', float('nan')):.3f}",
                      f"{s.get('mrr_at_10', float('nan')):.3f}")
    Console().print(table)
    if result["activation"]:
        weights = Table(title=f"sparse models: weight of {result['word']!r} in the representations (share firing)")
        for col in ("model", "documents naming it", "queries describing it"):
            weights.add_column(col)
        for name, a in result["activation"].items():
            weights.add_row(name, *(f"{a[k]['mean_weight']:.3f} ({a[k]['fires']:.0%})"
                                    for k in ("naming", "describing")))
        Console().print(weights)
    Console().print(f"adaptation corpus: {result['adaptation_pairs']}; report: {result['report']['html']}")


@app.command()
def history(
    data_root: DataRoot = DEFAULT_ROOT,
    task: Annotated[Optional[str], typer.Option(help="Only this task.")] = None,
    last: Annotated[int, typer.Option(help="Most recent N evaluation runs and publish decisions.")] = 10,
) -> None:
    """Past evaluations and publish decisions recorded in the data root's catalog, newest first."""
    from storage.catalog import Catalog
    from storage.layout import DataLayout

    with Catalog(DataLayout(data_root)) as cat:
        cat.refresh()
        rows, decisions = cat.eval_history(last, task), cat.decisions(last)
    if not rows and not decisions:
        console.print(f"no evaluations recorded in {data_root}: run `mosaic eval --data-root {data_root}` first")
        raise typer.Exit(1)
    table = Table(title=f"Evaluation history ({data_root})")
    for col in ("when (UTC)", "run", "model", "task", "metric", "value", "model checksum"):
        table.add_column(col)
    for at, run_id, m, t, metric, value, fp in rows:
        table.add_row(str(at)[:19], run_id, m, t, metric, f"{100 * value:.2f}", fp)
    Console().print(table)
    published = Table(title="Publish decisions (models/current is the newest published row)")
    for col in ("when (UTC)", "run", "published", "model", "why"):
        published.add_column(col, overflow="fold")
    for at, run_id, done, forced, candidate, path, message in decisions:
        published.add_row(str(at)[:19], run_id, ("yes (forced)" if forced else "yes") if done else "no",
                          path or candidate, message)
    Console().print(published)


@app.command()
def publish(
    run_or_model: Annotated[str, typer.Argument(help="A pipeline run id (see `mosaic history`) or a model "
                                                "directory.")],
    data_root: DataRoot = DEFAULT_ROOT,
    force: Annotated[bool, typer.Option(help="Publish even though the run failed its gate, or a bare model "
                                        "directory.")] = False,
    reason: Annotated[str, typer.Option(help="Why, recorded with the decision.")] = "published by hand",
    wait: Wait = None,
) -> None:
    """Publish a model as DATA_ROOT/models/current by hand: roll back to an earlier run's model, or
    (with --force) publish one the publish gate turned down. The decision is recorded and shown by
    `mosaic history`; the pipeline publishes what passes its gate by itself."""
    from storage.published import PublishError
    from tasks.publish import publish_by_hand

    root = _folder(data_root)
    try:
        with _locked(root, wait):
            record = publish_by_hand.fn(run_or_model, root, reason, force)
    except PublishError as exc:
        console.print(str(exc), style="red", markup=False)
        raise typer.Exit(2) from exc
    Console().print(f"published {record['candidate']} as {record['published_path']} "
                    f"(previous: {record['previous'] or 'none'})")


def _pipeline_config(config: Path):
    """The validated pipeline config; exit 2 with the reasons if invalid."""
    import yaml
    from pydantic import ValidationError

    from flows.rebuild import load_pipeline_config

    try:
        return load_pipeline_config(str(config))
    except (OSError, yaml.YAMLError, ValidationError, ValueError) as exc:
        console.print(f"[red]invalid pipeline config {escape(str(config))}:[/red]\n{escape(str(exc))}")
        raise typer.Exit(2) from exc


@app.command()
def serve(
    data_root: DataRoot = Path("mosaic-data"),
    config: Annotated[Optional[Path], typer.Option(
        "--config", "-c", help="Pipeline YAML of the rebuilds (default: the built-in demo).")] = None,
    cron: Annotated[str, typer.Option(help="Schedule of the rebuild (cron, UTC); '' for manual runs only.")
                    ] = DEFAULT_CRON,
) -> None:
    """Serve the `rebuild` deployment: on each scheduled (or UI-triggered) run it lists the
    snapshot source and runs the pipeline only if files were added or changed.

    Needs a Prefect API: start one with `prefect server start` (UI at http://127.0.0.1:4200)
    and `prefect config set PREFECT_API_URL=http://127.0.0.1:4200/api`. Runs in this process
    until interrupted; trigger a run from the UI (Deployments → rebuild/rebuild → Run) or with
    `prefect deployment run rebuild/rebuild`.
    """
    from prefect import serve as prefect_serve

    from deployments.rebuild import rebuild_deployment

    config_file = str(config.expanduser().resolve()) if config else None
    if config:
        _pipeline_config(config)  # validated before anything is registered
    prefect_serve(rebuild_deployment(config_file, str(data_root.expanduser().resolve()), cron or None))


@app.command()
def run(
    data_root: DataRoot = Path("mosaic-demo"),
    config: Annotated[Optional[Path], typer.Option(
        "--config", "-c", help="Pipeline YAML (sections base_model, ingest, filter, vocab, train, eval_tasks, "
        "eval_pool, gate; see docs/pipeline.example.yaml). Default: the built-in demo.")] = None,
    seed: Annotated[int, typer.Option(help="Demo only: the seed of the generated domain (its words' meanings "
                                      "and texts).")] = 0,
    wait: Wait = None,
) -> None:
    """Run the whole pipeline: ingest → filter → vocab → train stages → evaluation → publish gate.

    With no --config it runs the built-in demo: a generated snapshot of an invented biomedical
    sub-field (two dozen made-up drug and protein names) with the offline all-MiniLM-L6-v2 on
    CPU (a few minutes), ending with an adapted model and a report under DATA_ROOT that compares
    it with the base model on the held-out pairs and on finding documents about the invented
    words from a description of what they do. Rerunning takes completed steps from cache and
    resumes a failed training stage.
    """
    from flows.demo import demo_flow
    from flows.ingest import IngestFailed
    from flows.pipeline import mosaic_pipeline

    root = Path(_folder(data_root))
    cfg = _pipeline_config(config) if config else None
    if cfg is not None:
        _model(cfg.base_model)
        _model(cfg.filter.model)
        for name, path in (("quran", cfg.islamic.quran), ("tafsir", cfg.islamic.tafsir)) if cfg.islamic else ():
            if not Path(path).is_file():
                raise InputProblem(f"islamic.{name} of {config}: no file {path} (paths are relative to the "
                                   "directory you run mosaic from)")
    try:
        result = (_run(mosaic_pipeline, cfg, str(root), writes=root, wait=wait) if cfg is not None
                  else _run(demo_flow, str(root), seed, writes=root, wait=wait))
    except IngestFailed as exc:
        _print_stats(root)
        console.print(f"[red]ingest failed:[/red] {escape(str(exc))}\n"
                      "Fix the files named above and run the same command again.")
        raise typer.Exit(1) from exc
    out = Console()
    out.print(f"filter: kept {result['pairs_kept']} of {result['pairs']} pairs; "
              f"stage 1 added {result['vocab']['tokens_added']} tokens")
    _print_stages(result["stages"], paths=False)
    out.print(Path(result["report"]["markdown"]).read_text().split("![")[0])
    out.print(f"[green]adapted model:[/green] {result['final_model']}")
    decision = result["decision"]
    out.print(f"[{'green' if decision['published'] else 'yellow'}]{decision['message']}[/]")
    out.print(f"[green]published model:[/green] {result['published_model'] or 'none yet'}")
    out.print(f"[green]report:[/green] {result['report']['html']}")


def input_errors() -> tuple[type[Exception], ...]:
    """Errors that mean "the input is wrong": shown as one line that says what to do."""
    from pydantic import ValidationError

    from mosaic_core.evaluation import TaskUnavailable
    from mosaic_core.models import ModelNotFound
    from mosaic_core.trainer import StageInputError
    from mosaic_core.vocab import UnsupportedTokenizer
    from storage.benchmarks import BenchmarkError
    from storage.pairs_io import CorpusError
    from storage.published import PublishError

    from flows.runners import SchedulerUnreachable

    return (InputProblem, SchedulerUnreachable, CorpusError, ModelNotFound, StageInputError, BenchmarkError,
            TaskUnavailable, PublishError, ValidationError, UnsupportedTokenizer, FileNotFoundError, NotADirectoryError)


def _locked(root: str | Path, wait: float | None):
    """The writer lock of data root ``root`` (see storage/lock.py), named after this command;
    ``wait`` as given to ``--wait`` (None: do not wait; infinity: no limit)."""
    import sys

    from storage.lock import root_lock

    command = " ".join(["mosaic", *sys.argv[1:3 if sys.argv[1:2] == ["pairs"] else 2]])
    return root_lock(root, command, None if wait == math.inf else (wait or 0.0))


def _run(flow, *args, writes: str | Path | None = None, wait: float | None = None):
    """Run ``flow`` once its Prefect API answers (the arguments, evaluated before, checked the
    input), holding the writer lock of the data root it ``writes`` (none for a read-only run)."""
    from flows.server import api_ready

    with _locked(writes, wait) if writes else contextlib.nullcontext():
        api_ready()
        return flow(*args)


FLOW_COMMANDS = {"ingest", "filter", "pairs", "vocab", "train", "eval", "probe", "run"}
"""Commands that run Prefect flows (and need an API: the configured one, or a temporary server)."""


def _bare_wait(argv: list[str]) -> list[str]:
    """``--wait`` given without SECONDS (last, or before another option) means no limit."""
    out = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg == "--wait" and (i + 1 == len(argv) or argv[i + 1].startswith("-")):
            out.append("inf")
    return out


def main() -> None:
    """The ``mosaic`` console entry. A wrong input ends with one clear line (exit 2); a data
    root another command is writing, with who holds it (exit 3); any other failure of a flow
    with its message in a few lines and where the full log is (exit 1). The traceback only with
    ``--debug`` or ``MOSAIC_DEBUG=1``."""
    import sys

    from flows.console import full_log, short
    from flows.server import command_api
    from storage.lock import RootBusy

    debug = "--debug" in sys.argv or os.environ.get("MOSAIC_DEBUG") == "1"
    if "--debug" in sys.argv:
        sys.argv.remove("--debug")
    sys.argv[1:] = _bare_wait(sys.argv[1:])
    runs_flows = len(sys.argv) > 1 and sys.argv[1] in FLOW_COMMANDS and "--help" not in sys.argv
    log = full_log(sys.argv[1], tracebacks_on_console=debug) if runs_flows else contextlib.nullcontext()
    try:
        with log as log_path, command_api() if runs_flows else contextlib.nullcontext():
            app()  # usage errors, typer.Exit and ^C end here with click's message and exit code
    except SystemExit:  # --help, usage errors, typer.Exit: before input_errors(), which imports torch
        raise
    except RootBusy as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        sys.exit(3)
    except input_errors() as exc:
        if debug:
            raise
        console.print(f"[red]error:[/red] {escape(str(exc))}\n"
                      "[dim](--debug or MOSAIC_DEBUG=1 shows the traceback)[/dim]")
        sys.exit(2)
    except Exception as exc:  # a failure inside a flow: its message, and where the traceback is
        if debug or not runs_flows:
            raise
        console.print(f"[red]error:[/red] {type(exc).__name__}: {escape(short(str(exc)))}\n"
                      f"[dim]full log with the traceback: {log_path} (or rerun with --debug)[/dim]")
        sys.exit(1)


if __name__ == "__main__":
    main()
