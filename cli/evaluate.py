"""``mosaic eval``, ``diagnose``, ``probe`` and ``history``: scoring and inspecting models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from cli.common import (DEFAULT_ROOT, DataRoot, DocumentPrompt, QueryPrompt, _folder, _model, _run, app, console,
                        out_console, prompts_option, raised)
from mosaic_core.config_base import file_name
from mosaic_core.modeling.refs import OFFLINE_MODEL


def parse_models(items: list[str]) -> dict[str, str]:
    """``NAME=PATH`` or ``PATH`` (named after its folder) → {name: path}, names unique."""
    models: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = Path(item).name or item, item
        if name in models:
            raise typer.BadParameter(f"two models named {name!r}: use NAME=PATH")
        try:
            file_name(name, "a model's name")
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
        models[name] = path
    return models


def parse_dims(text: str | None) -> tuple[int, ...] | None:
    """``384,128,64`` → (384, 128, 64); None stays None."""
    if text is None:
        return None
    try:
        dims = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        dims = ()
    if not dims or min(dims) <= 0 or len(set(dims)) != len(dims):
        raise typer.BadParameter(f"--dims {text!r}: give distinct positive dimensions separated by commas, e.g. "
                                 "384,128,64")
    return dims


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
    query_prompt: QueryPrompt = None,
    document_prompt: DocumentPrompt = None,
    dims: Annotated[Optional[str], typer.Option(
        help="Score every task with the embeddings cut to each of these dimensions and renormalised, e.g. "
        "384,128,64 (a Matryoshka model's sizes); the report adds a task × dimension table.")] = None,
) -> None:
    """Score models on mteb tasks and local benchmark files; write a comparison report.

    Queries and documents get the prompts each model declares (a MOSAIC model declares those it
    was trained with), or --query-prompt/--document-prompt for every model."""
    from mosaic_core.config import EvalConfig
    from mosaic_core.eval_tasks import BeirTask, HeldoutTask, MtebTask, StsTask, VersesTask
    from mosaic_core.evaluate.scoring import MEDICAL_TASKS

    names = [t for name in task or [] for t in (MEDICAL_TASKS if name == "medical" else (name,))]
    specs = [MtebTask(name=n) for n in names]
    specs += [BeirTask(name=p.expanduser().resolve().name, path=str(p)) for p in beir or []]
    specs += [StsTask(name=p.stem, path=str(p)) for p in sts or []]
    if heldout:
        specs.append(HeldoutTask(name="heldout", path=heldout, heldout_pairs=heldout_pairs, pool=pool,
                                 query_column=query_column, document_column=document_column))
    if verses:
        if not quran:
            raise typer.BadParameter("--verses needs --quran (the verse collection)")
        specs.append(VersesTask(name="verses", path=verses, collection=str(quran), heldout_pairs=heldout_pairs,
                                query_column=query_column, document_column=document_column))
    if not specs:
        raise typer.BadParameter("no task: give --task, --beir, --sts, --heldout or --verses")
    if model_kind not in ("auto", "dense", "sparse"):
        raise typer.BadParameter(f"--model-kind {model_kind!r}: choose auto, dense or sparse")
    cfg = EvalConfig(tasks=tuple(specs), skip_unavailable=skip_unavailable, model_kind=model_kind,
                     prompts=prompts_option(query_prompt, document_prompt), dims=parse_dims(dims))
    try:
        models = {name: _model(path) for name, path in parse_models(model).items()}
        result = _run("flows.evaluate:eval_flow", models, cfg, _folder(out, "--out"),
                      _folder(data_root) if data_root else None, output=out)
    except Exception as exc:
        if not raised(exc, "flows.evaluate:EvaluationInputError"):
            raise
        console.print(str(exc), style="red", markup=False)
        raise typer.Exit(2) from exc
    out_console().print(Path(result["report"]["markdown"]).read_text().split("![")[0].rstrip()
                        .removesuffix("## Charts"))
    out_console().print(f"[green]report:[/green] {result['report']['html']}")


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
    from mosaic_core.evaluate.diagnose import diagnose_term, term_sentences
    from storage.pairs_io import iter_corpus_texts

    texts = list(text or [])
    if corpus:
        texts += iter_corpus_texts(corpus, tuple(columns or ("query", "document")))
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
    if not word.isalpha():
        raise typer.BadParameter(f"the invented word must be letters only, got {word!r}")
    models = {name: _model(path) for name, path in parse_models(model).items()}
    result = _run("flows.probe:probe_flow", models, word, _folder(out, "--out"), output=out)
    table = Table(title=f"documents naming {result['word']!r}, queries that only describe it")
    for col in ("model", "NDCG@10", "recall@5", "MRR@10"):
        table.add_column(col)
    for name, (score,) in result["scores"].items():
        s = score["scores"]
        table.add_row(name, f"{score['value']:.3f}", f"{s.get('recall_at_5', float('nan')):.3f}",
                      f"{s.get('mrr_at_10', float('nan')):.3f}")
    out_console().print(table)
    if result["activation"]:
        weights = Table(title=f"sparse models: weight of {result['word']!r} in the representations (share firing)")
        for col in ("model", "documents naming it", "queries describing it"):
            weights.add_column(col)
        for name, a in result["activation"].items():
            weights.add_row(name, *(f"{a[k]['mean_weight']:.3f} ({a[k]['fires']:.0%})"
                                    for k in ("naming", "describing")))
        out_console().print(weights)
    out_console().print(f"adaptation corpus: {result['adaptation_pairs']}; report: {result['report']['html']}")


def _ticks_table(ticks: list[dict], data_root: Path, task: str | None) -> Table:
    """One row per tick, newest first: its kind and why, its pairs, tokens, cost and its
    candidate's scores (main score × 100)."""
    table = Table(title=f"Ticks ({data_root}): full rebuilds and update ticks")
    for col in ("tick", "kind", "why", "new pairs", "pairs trained", "tokens added", "steps", "minutes", "judged",
                "scores", "published"):
        table.add_column(col, overflow="fold")
    for t in reversed(ticks):
        scores = t.get("scores", {}).get(t.get("candidate"), {})
        table.add_row(str(t["tick"]), t["kind"], t["reason"], f"{t['new_pairs']:,}" if t["kind"] == "update" else "–",
                      f"{t.get('pairs_trained', 0):,}", str(t.get("tokens_added", "–")), str(t.get("steps", "–")),
                      f"{t.get('seconds', 0) / 60:.1f}", t.get("candidate", "–"),
                      ", ".join(f"{k} {100 * v:.2f}" for k, v in scores.items() if task is None or k == task),
                      "yes" if t.get("published") else "no")
    return table


@app.command()
def history(
    data_root: DataRoot = DEFAULT_ROOT,
    task: Annotated[Optional[str], typer.Option(help="Only this task.")] = None,
    last: Annotated[int, typer.Option(help="Most recent N evaluation runs and publish decisions.")] = 10,
) -> None:
    """The data root's ticks (each run that trained: a full rebuild or an update tick, why, the pairs
    it trained on, the tokens it added, its cost and scores), then past evaluations and publish
    decisions recorded in its catalog, newest first."""
    from storage.catalog import Catalog
    from storage.layout import DataLayout
    from storage.ticks import read_ticks

    with Catalog(DataLayout(data_root)) as cat:
        cat.refresh()
        rows, decisions = cat.eval_history(last, task), cat.decisions(last)
    ticks = read_ticks(str(data_root))[-last:]
    if ticks:
        out_console().print(_ticks_table(ticks, data_root, task))
    if not rows and not decisions:
        console.print(f"no evaluations recorded in {data_root}: run `mosaic eval --data-root {data_root}` first")
        raise typer.Exit(1)
    table = Table(title=f"Evaluation history ({data_root})")
    for col in ("when (UTC)", "run", "model", "task", "metric", "value", "model checksum"):
        table.add_column(col)
    for at, run_id, m, t, metric, value, fp in rows:
        table.add_row(str(at)[:19], run_id, m, t, metric, f"{100 * value:.2f}", fp)
    out_console().print(table)
    published = Table(title="Publish decisions (models/current is the newest published row)")
    for col in ("when (UTC)", "run", "published", "recipe", "model", "why"):
        published.add_column(col, overflow="fold")
    for at, run_id, done, forced, candidate, path, message, recipe in decisions:
        published.add_row(str(at)[:19], run_id, ("yes (forced)" if forced else "yes") if done else "no",
                          recipe or "–", path or candidate, message)
    out_console().print(published)

