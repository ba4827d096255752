"""Stage 1's distillation contexts: texts cut into windows read in both tokenizations, and the
sentences drawn per new token (:mod:`mosaic_core.vocab.distill` trains on them; pruning measures
on them). Streamed: a corpus's sentences are tokenized a chunk at a time, and only the windows
drawn are held."""

from __future__ import annotations

import copy
import logging
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

import numpy as np
import torch
from tqdm.auto import tqdm

log = logging.getLogger(__name__)


@dataclass
class Window:
    """One training text cut to at most ``max_length`` base tokens, in both tokenizations, as
    int32 arrays (a drawn window costs 12 bytes a token, a list of ints about ten times that).

    ``align[j]`` is the new-token position that base position ``j`` falls in."""

    base_ids: np.ndarray
    new_ids: np.ndarray
    align: np.ndarray

    def new_tokens(self, first_new_id: int) -> list[int]:
        """The distinct new tokens (ids from ``first_new_id`` on) it holds, ascending."""
        return np.unique(self.new_ids[self.new_ids >= first_new_id]).tolist()


def _spans(encoding) -> tuple[np.ndarray, np.ndarray]:
    """(start offsets of the non-special tokens, indices of the special ones) of one encoding."""
    special = np.asarray(encoding.special_tokens_mask, dtype=bool)
    starts = np.asarray([s for s, _ in encoding.offsets], dtype=np.int64)
    return starts, special


def align_positions(base_enc, new_enc) -> list[int] | None:
    """For each base position, the new position covering it: a base piece belongs to the last
    new token starting at or before it; special tokens pair up in order. ``None`` if the two
    tokenizations disagree on their special tokens."""
    b_starts, b_special = _spans(base_enc)
    n_starts, n_special = _spans(new_enc)
    if b_special.sum() != n_special.sum():
        return None
    n_plain = np.flatnonzero(~n_special)
    align = np.empty(len(b_starts), dtype=np.int64)
    align[b_special] = np.flatnonzero(n_special)
    if len(n_plain):
        where = np.searchsorted(n_starts[n_plain], b_starts[~b_special], side="right") - 1
        align[~b_special] = n_plain[np.clip(where, 0, len(n_plain) - 1)]
    elif (~b_special).any():
        return None
    return align.tolist()


def _plain_backend(tokenizer):
    """A copy of the tokenizer's Rust backend with no truncation or padding (calling the
    Python tokenizer leaves its last settings on the shared backend)."""
    backend = copy.deepcopy(tokenizer.backend_tokenizer)
    backend.no_truncation()
    backend.no_padding()
    return backend


WINDOW_CHUNK = 4096
"""Texts tokenized at once when windows are made from a stream of them."""


def _indexed_windows(texts: Sequence[str], base_tok, new_tok, max_length: int,
                     first_new_id: int) -> list[tuple[int, Window]]:
    """(position in ``texts``, window) of each text that holds a new token (:func:`make_windows`)."""
    cut = base_tok(list(texts), truncation=True, max_length=max_length, return_offsets_mapping=True,
                   return_special_tokens_mask=True)
    pieces = []
    for text, offsets, special in zip(texts, cut["offset_mapping"], cut["special_tokens_mask"], strict=True):
        ends = [e for (_, e), s in zip(offsets, special, strict=True) if not s]
        pieces.append(text[: ends[-1]] if ends else "")
    base_enc = _plain_backend(base_tok).encode_batch(pieces)
    new_enc = _plain_backend(new_tok).encode_batch(pieces)
    windows = []
    for i, (b, n) in enumerate(zip(base_enc, new_enc, strict=True)):
        if not n.ids or max(n.ids) < first_new_id or len(b.ids) > max_length:
            continue
        align = align_positions(b, n)
        if align is not None:
            windows.append((i, Window(*(np.asarray(x, dtype=np.int32) for x in (b.ids, n.ids, align)))))
    return windows


def make_windows(texts: Sequence[str], base_tok, new_tok, max_length: int, first_new_id: int) -> list[Window]:
    """Windows of the texts that hold at least one new token (the others cannot teach a new row).

    A text is cut after its ``max_length``-th base token (specials included), at a character
    position, so both tokenizations read exactly the same characters."""
    return [w for _, w in _indexed_windows(texts, base_tok, new_tok, max_length, first_new_id)]


def iter_windows(texts: Iterable[str], base_tok, new_tok, max_length: int,
                 first_new_id: int) -> Iterator[tuple[int, Window]]:
    """(position in ``texts``, window) of each text that holds a new token, as :func:`make_windows`
    makes them, tokenizing :data:`WINDOW_CHUNK` texts at a time: memory holds one chunk's
    encodings, not the corpus's."""
    it, start = iter(texts), 0
    while batch := list(islice(it, WINDOW_CHUNK)):
        for i, window in _indexed_windows(batch, base_tok, new_tok, max_length, first_new_id):
            yield start + i, window
        start += len(batch)


def first_windows(texts: Iterable[str], base_tok, new_tok, max_length: int, first_new_id: int,
                  limit: int | None) -> list[Window]:
    """``make_windows(texts)[:limit]``, tokenizing only as far as it needs."""
    return [w for _, w in islice(iter_windows(texts, base_tok, new_tok, max_length, first_new_id), limit)]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")


def iter_sentences(texts: Iterable[str]) -> Iterator[str]:
    """The texts split after a sentence's final ``.``, ``!`` or ``?`` (when the next one starts
    with a capital, a digit or a bracket). An abbreviation may split a sentence in two: both
    halves are still contexts of the words they hold."""
    for text in texts:
        yield from (s for s in _SENTENCE_END.split(text.strip()) if s)


def split_sentences(texts: Iterable[str]) -> list[str]:
    """:func:`iter_sentences` as a list."""
    return list(iter_sentences(texts))


def draw_sets(tokens: Sequence[Sequence[int]], k: int, seed: int) -> list[tuple[int, list[int]]]:
    """(window number, the new tokens it was drawn for), from each window's distinct new tokens
    ``tokens``: in a seeded random order, a window is kept while one of its new tokens has fewer
    than ``k`` kept windows. Stops once every token has its ``k`` (no later window would be kept)."""
    seen: Counter[int] = Counter()
    open_tokens = len({t for ts in tokens for t in ts})
    kept = []
    for i in _order(len(tokens), seed, 0):
        if not open_tokens:
            break
        owed = [t for t in tokens[i] if seen[t] < k]
        if not owed:
            continue
        kept.append((i, owed))
        for t in tokens[i]:
            seen[t] += 1
            open_tokens -= seen[t] == k
    return kept


def draw_windows(texts: Sequence[str], base_tok, new_tok, max_length: int, first_new_id: int, k: int,
                 seed: int) -> list[tuple[Window, list[int]]]:
    """(window, the new tokens it was drawn for) of the sentences of ``texts``, drawn per new token
    (:func:`draw_sets`) as from ``make_windows(split_sentences(texts))``, without holding those
    windows: a first pass keeps each window's sentence number and new tokens, the draw runs on
    them, a second pass tokenizes again only the sentences drawn."""
    where, tokens = [], []
    bar = tqdm(desc="stage 1: sentences holding new tokens", unit=" windows", disable=None, dynamic_ncols=True)
    for i, window in iter_windows(iter_sentences(texts), base_tok, new_tok, max_length, first_new_id):
        where.append(i)
        tokens.append(window.new_tokens(first_new_id))
        bar.update(1)
    bar.close()
    drawn = draw_sets(tokens, k, seed)
    log.info("stage 1: %d sentences hold new tokens; %d drawn, up to %d per token", len(tokens), len(drawn), k)
    wanted = {where[w] for w, _ in drawn}
    chosen = [(i, s) for i, s in enumerate(iter_sentences(texts)) if i in wanted]
    built = {chosen[j][0]: w for j, w in iter_windows([s for _, s in chosen], base_tok, new_tok, max_length,
                                                      first_new_id)}
    return [(built[where[w]], owed) for w, owed in drawn]


def _order(n: int, seed: int, epoch: int) -> list[int]:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()


def reverted(window: Window, token: int) -> list[int]:
    """``window``'s new ids with every occurrence of ``token`` read as its base pieces again."""
    covers: dict[int, list[int]] = {}
    for p, b in zip(window.align.tolist(), window.base_ids.tolist(), strict=True):
        covers.setdefault(p, []).append(b)
    return [i for p, t in enumerate(window.new_ids.tolist()) for i in (covers.get(p, []) if t == token else [t])]
