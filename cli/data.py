"""``mosaic ingest``, ``stats``, ``filter`` and ``pairs islamic``: the data commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from cli.common import DEFAULT_ROOT, DataRoot, Wait, _folder, _model, _run, app, console, out_console, raised
from flows.runners import task_runner
from mosaic_core.config import DEFAULT_BASE, NCBI_PUBMED_URL, FilterConfig, IngestConfig, IslamicConfig, PairConfig
from mosaic_core.modeling.refs import OFFLINE_MODEL


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
    root = _folder(data_root)
    try:
        _run("flows.ingest:ingest_flow", cfg, root, writes=root, wait=wait,
             options={"task_runner": task_runner(workers, dask_address)})
    except Exception as exc:
        if not raised(exc, "flows.ingest:IngestFailed"):
            raise
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

    out = out_console()
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
    = DEFAULT_BASE,
    k: Annotated[int, typer.Option(help="Keep a pair iff its own document is in its query's top k.")] = 2,
    threshold: Annotated[
        Optional[float], typer.Option(help="Threshold mode instead: keep pairs with cosine >= this.")
    ] = None,
    chunk_size: Annotated[int, typer.Option(help="Pairs per exact search (one index).")] = 1_000_000,
    precision: Annotated[str, typer.Option(help="auto, fp32, bf16 or fp16 (CUDA).")] = "auto",
    backend: Annotated[str, typer.Option(
        help="torch, or on CPU onnx / onnx-int8: encode through the filter model's verified ONNX export, made "
        "once into the data root's cache/onnx (needs pip install -e '.[export]'; slower than torch on the 2-core "
        "CPU measured: docs/concepts/filter.md).")] = "torch",
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
    from storage.pairs_io import check_pairs_source

    try:
        cfg = FilterConfig(model=model, mode="threshold" if threshold is not None else "consistency", k=k,
                           threshold=threshold, chunk_size=chunk_size, precision=precision, backend=backend,
                           batch_tokens=batch_tokens, query_column=query_column, document_column=document_column)
    except ValueError as exc:  # pydantic's ValidationError included: an option's value, named
        raise typer.BadParameter(str(exc)) from exc
    check_pairs_source(input, (query_column, document_column), "--input")
    _model(model)
    root = _folder(data_root)
    manifests = _run("flows.filter:filter_flow", input, cfg, root, writes=root, wait=wait)
    from tasks.filter import score_report  # imported by the flow

    out_console().print(score_report.fn(root))
    table = Table(title=f"{cfg.mode} filter")
    for col in ("partition", "pairs", "kept", "kept %", "bad rows"):
        table.add_column(col)
    for m in manifests:
        bad = sum(v for key, v in m.dropped.items() if key not in ("inconsistent", "below_threshold"))
        table.add_row(m.partition, str(m.rows_out), str(m.kept), f"{100 * m.kept / max(m.rows_out, 1):.1f}",
                      str(bad))
    out_console().print(table)


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
    = DEFAULT_BASE,
    threshold: Annotated[float, typer.Option(help="Keep candidates with cosine >= this.")] = 0.5,
    wait: Wait = None,
) -> None:
    """Verse pairs linked by Tafsir cross-references, threshold-filtered (the low-resource recipe).

    Writes DATA_ROOT/islamic_candidates.jsonl, then filters it like `mosaic filter --threshold`.
    """
    cfg = IslamicConfig(quran=str(quran), tafsir=str(tafsir), threshold=threshold).filter_config(_model(model))
    root = _folder(data_root)
    result = _run("flows.islamic:islamic_pairs_flow", str(quran), str(tafsir), cfg, root, writes=root, wait=wait)
    stats, manifest = result["stats"], result["manifest"]
    out = out_console()
    out.print(f"tafsir blocks {stats['blocks']:,}; references {stats['references']:,} "
              f"({stats['invalid_references']} to verses that do not exist: {stats['invalid_examples'][:3]}); "
              f"self-links {stats['self_links']}; duplicates {stats['duplicates']}; "
              f"[bold]candidates {stats['candidates']:,}[/bold]")
    out.print(result["scores"])
    out.print(f"[bold]kept {manifest.kept:,} of {manifest.rows_out:,}[/bold] at cosine >= {threshold}")
    for pid, cos, q, d in result["dropped"]:
        out.print(f"dropped {pid} (cos {cos:.3f}): {q[:80]!r} -> {d[:80]!r}")

