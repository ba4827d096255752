"""``mosaic vocab``: stage 1, the domain tokenizer and the expanded model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from cli.common import _folder, _model, _run, app, out_console, parse_sets
from mosaic_core.config import DEFAULT_BASE, DistillConfig, VocabConfig
from mosaic_core.config_base import with_sets
from mosaic_core.modeling.refs import OFFLINE_MODEL


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
    ] = DEFAULT_BASE,
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
    sample_texts: Annotated[int, typer.Option(
        help="Read at most this many texts of the corpus (those with the smallest content hash; all of a smaller "
        "corpus): stage 1's time and memory stop growing with the corpus.")] = VocabConfig().sample_texts,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", help="Set any stage-1 field by its dotted path, after the options above (e.g. --set "
        "distill.batch_size=16 --set distill.heldout_texts=64); the value is read as YAML. The fields are the "
        "configuration reference's vocab section (docs/reference/config.md).")] = None,
) -> None:
    """Stage 1: train a domain tokenizer and add its useful new tokens to the base model.

    The domain tokenizer is of the base's kind (WordPiece for BERT, byte-level BPE for RoBERTa/GPT-2,
    Unigram for XLM-R); its tokens the corpus uses at least --min-count times and that shorten their
    words go into the base tokenizer's model (used mid-word too). New rows start as the mean of their
    pieces, then are distilled (trained, alone, so the expanded model reproduces the base model's
    embeddings of the corpus); then the --prune share of the costliest is dropped. Writes a model that
    SentenceTransformer/AutoModel load, domain_token_ids.json (V_D) and vocab_report.{json,md} (tokens
    added and rejected, the trade-off per threshold and pruned share, fertility, drift).
    """
    from mosaic_core.modeling.modeldir import vocab_report_markdown

    cfg = _vocab_config(base_model=base_model, vocab_size=vocab_size, min_frequency=min_frequency,
                        min_count=min_count, max_tokens=max_tokens, init=init, prune=prune,
                        prune_sentences=prune_sentences,
                        distill={"target": distill_target, "lr": distill_lr, "seed": distill_seed,
                                 "contexts": distill_contexts, "per_token": distill_per_token,
                                 **({"max_steps": distill_steps} if distill_steps else {})},
                        text_columns=tuple(columns or ("query", "document")), reduce_to_corpus=reduce_to_corpus,
                        model_kind=model_kind, sample_texts=sample_texts, sets=parse_sets(set_ or []))
    _check_sources(corpus, cfg)
    _model(base_model)
    report = _run("flows.vocab:vocab_flow", corpus, cfg, _folder(out, "--out"), output=out)
    out_console().print(vocab_report_markdown(out) or report)


def _check_sources(corpus: str, cfg: VocabConfig) -> None:
    """The corpus (and the one to reduce the vocabulary to) are data roots or pairs files with the text columns."""
    from storage.pairs_io import check_pairs_source

    check_pairs_source(corpus, cfg.text_columns, "--corpus")
    if cfg.reduce_to_corpus:
        check_pairs_source(cfg.reduce_to_corpus, cfg.text_columns, "--reduce-to-corpus")


def _vocab_config(sets: dict[str, object], **fields) -> VocabConfig:
    """The stage-1 config of ``mosaic vocab``'s options, then its ``--set`` fields; options that do not
    validate are a usage error."""
    from pydantic import ValidationError

    try:
        return VocabConfig.model_validate(with_sets(VocabConfig(**fields).model_dump(mode="json"), sets))
    except (ValidationError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
