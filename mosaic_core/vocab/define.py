"""Stage 1 with a glossary: its terms as candidates with evidence of their own, and their rows
learnt from their definitions.

* :func:`glossary_candidates`: the one-word terms and synonyms (:func:`single_words`) that the
  base tokenizer splits into pieces become candidate tokens whatever the domain tokenizer
  learnt; selection keeps one when the corpus uses it ``min_count`` times (a term that names a
  concept is worth a token on less evidence than a fragment), and pruning never drops it.
* :func:`define_rows`: distillation reproduces what the base model makes of a text, and the
  base model makes nothing of ``zorvatide`` (``zor ##vat ##ide``). A glossary token's row is
  trained instead so that the expanded model reading a sentence that holds the term produces
  the embedding the base model gives the same sentence with the term's definition beside it
  (``Serum zorvatide (a drug that blocks calcium channels in the heart muscle) levels were
  measured``): the row carries what the term means, read through the encoder as it is. Only
  the glossary rows train (:class:`~mosaic_core.vocab.distill.RowDistiller`, pooled target);
  the sentences are drawn per token from the corpus as distillation draws them, plus the term
  alone beside its definition.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from mosaic_core.config import DistillConfig
from mosaic_core.data.glossary import GlossaryEntry, single_words
from mosaic_core.modeling.encode import Pooling
from mosaic_core.vocab.distill import RowDistiller, collate
from mosaic_core.vocab.windows import Window, _order, draw_sets, iter_sentences

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RowBudget:
    """What a full rebuild's stage 1 gave each glossary row (``updates``: the batches that held
    it, on average, of the ``terms`` rows it learnt), which an update tick gives the few rows it
    adds: its batches shrink to its share of the terms (at least one window), so that an update
    reads about as many of a row's windows as a full rebuild's did, and it trains until its rows
    have had as many updates (at most ``define_steps``). A full rebuild's 200 steps over two dozen
    terms put each row in about half of its batches of 16; a tick that adds one term trains it
    for about 100 steps of one window, not 200 steps of 16, nor 9."""

    updates: float
    terms: int

    def batch_size(self, full: int, terms: int) -> int:
        """The batch of a tick that defines ``terms`` rows, of the full rebuild's ``full``."""
        return max(1, min(full, math.ceil(full * terms / self.terms)))


@dataclass(frozen=True)
class GlossaryTerms:
    """What stage 1 takes from a glossary: its entries and how it uses them."""

    entries: tuple[GlossaryEntry, ...]
    min_count: int = 2
    define_steps: int = 200
    budget: RowBudget | None = None
    """An update tick's budget for the rows it defines: the last full rebuild's (:class:`RowBudget`)."""


def word_form(base_tok):
    """``name -> words``: the words a name is as it stands inside a sentence (after a space:
    ``Ġzorvatide`` for byte-level BPE, ``▁zorvatide`` for SentencePiece, ``zorvatide`` for
    WordPiece), by the tokenizer's own normalizer and pre-tokenizer."""
    backend = base_tok.backend_tokenizer

    def words(name: str) -> list[str]:
        text = "a " + name
        norm = backend.normalizer.normalize_str(text) if backend.normalizer else text
        return [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(norm)][1:]
    return words


def glossary_candidates(spec, base_tok, terms: GlossaryTerms) -> dict[str, tuple[list[str], GlossaryEntry]]:
    """Token → (its base pieces, its entry) for every one-word name of the glossary that the base
    tokenizer splits into two or more pieces (never one it can only write as unknown)."""
    out = {}
    for word, entry in single_words(terms.entries, word_form(base_tok)).items():
        pieces = None if word in spec.vocab else spec.base_pieces(word)
        if pieces is not None and len(pieces) > 1:
            out[word] = (pieces, entry)
    return out


def _defined(sentence: str, names: dict[str, str]) -> str:
    """``sentence`` with ``(definition)`` after the first use of each glossary name in it."""
    for name, definition in names.items():
        match = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", sentence, flags=re.IGNORECASE)
        if match:
            sentence = f"{sentence[:match.end()]} ({definition}){sentence[match.end():]}"
    return sentence


def _window(base_tok, new_tok, student: str, teacher: str, max_length: int) -> Window:
    """A window whose student reads ``student`` with the new tokenizer and whose teacher reads
    ``teacher`` with the base one (pooled target only: no alignment between the two)."""
    new_ids = new_tok(student, truncation=True, max_length=max_length)["input_ids"]
    base_ids = base_tok(teacher, truncation=True, max_length=2 * max_length)["input_ids"]
    return Window(np.asarray(base_ids, dtype=np.int32), np.asarray(new_ids, dtype=np.int32),
                  np.zeros(len(base_ids), dtype=np.int32))


def definition_windows(texts: Sequence[str], base_tok, new_tok, defined: dict[int, GlossaryEntry],
                       cfg: DistillConfig) -> list[Window]:
    """The windows :func:`define_rows` trains on: per glossary token (id → entry) up to
    ``cfg.per_token`` corpus sentences that hold it (drawn as distillation draws them), each
    read by the teacher with the definitions of the glossary names it uses, and the term alone
    beside its definition."""
    wanted = set(defined)
    sentences, tokens = [], []
    for sentence in iter_sentences(texts):
        ids = new_tok(sentence, truncation=True, max_length=cfg.max_length)["input_ids"]
        held = sorted(wanted.intersection(ids))
        if held:
            sentences.append(sentence)
            tokens.append(held)
    windows = []
    for i, _ in draw_sets(tokens, cfg.per_token, cfg.seed):
        names = {name: defined[t].definition for t in tokens[i] for name in defined[t].names}
        windows.append(_window(base_tok, new_tok, sentences[i], _defined(sentences[i], names), cfg.max_length))
    for entry in {id(e): e for e in defined.values()}.values():
        windows.append(_window(base_tok, new_tok, entry.term, f"{entry.term} ({entry.definition})", cfg.max_length))
    return windows


def _batches(n: int, batch_size: int, seed: int, steps: int):
    """The window indices of each of ``steps`` batches, in the order :func:`define_rows` trains them."""
    per_epoch = max(1, -(-n // batch_size))
    for step in range(steps):
        epoch, i = divmod(step, per_epoch)
        yield _order(n, seed, epoch)[i * batch_size:(i + 1) * batch_size]


def steps_for_updates(rows: Sequence[frozenset[int]], batch_size: int, seed: int, updates: float, cap: int) -> int:
    """The fewest steps (at most ``cap``) after which the rows of the windows ``rows`` (each
    window's glossary rows) have been in ``updates`` batches on average."""
    counts = dict.fromkeys(set().union(*rows), 0)
    if not counts:
        return 0
    for step, idx in enumerate(_batches(len(rows), batch_size, seed, cap), start=1):
        for row in set().union(*(rows[j] for j in idx)):
            counts[row] += 1
        if sum(counts.values()) >= updates * len(counts):
            return step
    return cap


def define_rows(encoder: torch.nn.Module, pooling: Pooling, base_tok, new_tok, defined: dict[int, GlossaryEntry],
                texts: Sequence[str], cfg: DistillConfig, steps: int, device: torch.device | None = None,
                budget: RowBudget | None = None) -> dict:
    """Train the rows of the glossary tokens ``defined`` (id → entry) on
    :func:`definition_windows` for ``steps`` steps (with an update tick's ``budget``: in its
    smaller batches, the fewest steps that give each row its updates, at most ``steps``:
    :func:`steps_for_updates`; batches, learning rate, sentences per token and seed: ``cfg``'s),
    the loss ``1 − cos``
    between the expanded model's pooled embedding of each sentence and the base model's of the
    sentence with the definitions; returns its record (steps, windows, ``row_updates``: the
    batches that held a row, on average over the rows some window holds, as
    :func:`steps_for_updates` counts them, ``loss_start`` and ``loss_end``: the mean loss of the
    first and the last ``loss_span`` steps, a pass or, with fewer than two, half the steps)."""
    if not defined or not steps:
        return {"tokens": 0, "windows": 0, "steps": 0}
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    windows = definition_windows(texts, base_tok, new_tok, defined, cfg)
    rows = [frozenset(defined).intersection(w.new_ids.tolist()) for w in windows]
    if budget is not None:
        cfg = cfg.model_copy(update={"batch_size": budget.batch_size(cfg.batch_size, len(defined))})
        steps = max(1, steps_for_updates(rows, cfg.batch_size, cfg.seed, budget.updates, steps))
    pad = base_tok.pad_token_id if base_tok.pad_token_id is not None else 0
    distiller = RowDistiller(encoder.to(device), pooling, sorted(defined), pad,
                             cfg.model_copy(update={"target": "pooled"}), device)
    per_epoch = max(1, -(-len(windows) // cfg.batch_size))
    losses, updates = [], 0
    batches = _batches(len(windows), cfg.batch_size, cfg.seed, steps)
    for step, idx in enumerate(tqdm(batches, total=steps, desc="stage 1: glossary rows", unit="step", disable=None,
                                    dynamic_ncols=True)):
        updates += len(set().union(*(rows[j] for j in idx)))
        losses.append(float(distiller.step(collate([windows[j] for j in idx], pad), step, steps)))
        if (step + 1) % cfg.eval_every == 0:
            log.info("stage 1: glossary rows step %d/%d: loss %.5f (mean of the last %d steps)", step + 1, steps,
                     np.mean(losses[-cfg.eval_every:]), cfg.eval_every)
    distiller.close()
    encoder.to("cpu")
    span = min(per_epoch, max(1, steps // 2))  # a pass, or half the steps when there are fewer than two passes
    record = {"tokens": len(defined), "windows": len(windows), "steps": steps, "batch_size": cfg.batch_size,
              "row_updates": updates / max(1, len(set().union(*rows))), "loss_span": span,
              "loss_start": float(np.mean(losses[:span])), "loss_end": float(np.mean(losses[-span:]))}
    log.info("stage 1: %d glossary rows learnt from their definitions on %d windows in %d steps (loss %.4f -> %.4f, "
             "the mean of the first and the last %d steps)", len(defined), len(windows), steps, record["loss_start"],
             record["loss_end"], span)
    return record
