"""Stage 1, step 2: which of the domain tokenizer's tokens to add, chosen by evidence.

The paper adds every domain-tokenizer token the base vocabulary lacks. On a small corpus that
adds thousands of fragments seen a handful of times (``pati``, ``ritu``, ``jor``): training
never sees them often enough to learn them, while each one changes how every text holding it
is tokenised. Here a candidate is judged by what it does to the corpus under the *real*
algorithm of the expanded tokenizer (WordPiece's greedy longest match, BPE's merges,
Unigram's Viterbi), over the corpus's distinct words weighted by their counts:

* ``uses``: how often the token appears in the expanded segmentation of the corpus;
* ``saved``: base pieces saved where it appears (a word's saving is shared by the new
  tokens in it);
* ``not_a_word``: a token without a letter (``##71``, ``2019``) is a number or punctuation,
  not domain vocabulary (and the domain trainer's tie-breaking, which varies between runs —
  huggingface/tokenizers#1794 — varies mostly in such pieces);
* ``no_saving``: a token that makes any corpus word longer is rejected, and so is one that,
  as often as it shortens a word, re-segments one without shortening it (``atsas``: ``at
  ##sas`` → ``ats ##as``; the fragments ``interp``, ``transc``, ``seg`` behave so). A
  useful token may still re-segment a rare variant at equal length (``placebo`` turns
  ``place ##bos`` into ``placebo ##s`` while shortening 1,700 other occurrences): it stays.

Selection is a fixed point: drop the tokens that fail (``no_saving``, ``rare``: fewer than
``min_count`` uses), re-segment, repeat (a dropped token changes how other tokens are used);
then, if ``max_tokens`` is set, keep the ``max_tokens`` with the largest saving and repeat.
After the rows are initialised, stage 1 may drop the tokens whose rows still cost the most
(``costly``, :func:`mosaic_core.vocab.build.prune_selection`) and settle again.
It climbs to ``min_count`` through a ladder of thresholds (:data:`LADDER`), so the rarest
fragments go first and never sway the counts of the tokens that remain. The result is a
function of the candidate set (in its given, stable order), the corpus and the two knobs.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from tokenizers import Tokenizer

REJECT_REASONS = ("not_a_word", "no_saving", "rare", "cap", "costly")


def word_counts(tokenizer, texts: Iterable[str]) -> Counter:
    """Words (as the tokenizer's normalizer and pre-tokenizer define them) → count."""
    backend = tokenizer.backend_tokenizer
    counts: Counter = Counter()
    for text in texts:
        norm = backend.normalizer.normalize_str(text) if backend.normalizer else text
        counts.update(word for word, _ in backend.pre_tokenizer.pre_tokenize_str(norm))
    return counts


class Segmenter:
    """The bare model of a tokenizer state: splits already pre-tokenized words into pieces."""

    def __init__(self, state: dict):
        bare = {"version": state.get("version", "1.0"), "truncation": None, "padding": None, "added_tokens": [],
                "normalizer": None, "pre_tokenizer": None, "model": state["model"], "post_processor": None,
                "decoder": None}
        self._tokenizer = Tokenizer.from_str(json.dumps(bare))

    def __call__(self, words: list[str]) -> list[list[str]]:
        encodings = self._tokenizer.encode_batch([[w] for w in words], is_pretokenized=True,
                                                 add_special_tokens=False)
        return [e.tokens for e in encodings]


def fertility_of(segmenter: Segmenter, counts: Counter) -> tuple[int, float, float]:
    """(words, pieces per word, share of single-piece words) of ``counts`` under ``segmenter``."""
    words = sorted(counts)
    total = pieces = single = 0
    for word, seg in zip(words, segmenter(words), strict=True):
        n = counts[word]
        total += n
        pieces += n * len(seg)
        single += n * (len(seg) == 1)
    return total, pieces / max(total, 1), single / max(total, 1)


@dataclass
class Evidence:
    """Per new entry: uses in words it shortens and base pieces saved there; uses in words it
    re-segments at equal length (``neutral``) or makes longer (``longer``)."""

    uses: Counter = field(default_factory=Counter)
    saved: Counter = field(default_factory=Counter)
    neutral: Counter = field(default_factory=Counter)
    longer: Counter = field(default_factory=Counter)

    def saves_nothing(self, token: str) -> bool:
        return self.longer[token] > 0 or (self.neutral[token] > 0 and self.neutral[token] >= self.uses[token])


def evidence(words: list[str], counts: Counter, base: list[list[str]], expanded: list[list[str]],
             new: set[str]) -> Evidence:
    """What each new entry does to the corpus: ``base``/``expanded`` are the segmentations of
    ``words`` without and with the new entries ``new``."""
    ev = Evidence()
    for word, old, seg in zip(words, base, expanded, strict=True):
        if seg == old:
            continue
        used = [t for t in seg if t in new]
        n = counts[word]
        if len(seg) >= len(old):
            (ev.neutral if len(seg) == len(old) else ev.longer).update({t: n for t in used})
            continue
        share = (len(old) - len(seg)) / max(len(used), 1)
        for t in used:
            ev.uses[t] += n
            ev.saved[t] += n * share
    return ev


@dataclass
class Selection:
    """The chosen candidates (→ base pieces) and the rejected ones with their reason and evidence."""

    tokens: dict[str, list[str]]
    rejected: dict[str, str]
    rejected_uses: dict[str, int]
    uses: dict[str, int]
    saved: dict[str, float]
    iterations: int
    min_count: int


def has_letter(state: dict):
    """``token -> bool``: whether the token's text (as the tokenizer's own decoder writes it: no
    ``##``, byte-level bytes decoded, no ``▁``) holds a letter."""
    decoder = Tokenizer.from_str(json.dumps(state)).decoder

    def check(token: str) -> bool:
        return any(ch.isalpha() for ch in (decoder.decode([token]) if decoder else token))
    return check


class Selector:
    """Runs the selection on one corpus: ``counts`` (word → count) segmented once by the base."""

    def __init__(self, spec, state: dict, counts: Counter, first_id: int, domain_state: dict,
                 max_iterations: int = 100, floors: dict[str, int] | None = None):
        self.is_word = has_letter(state)
        self.spec, self.state, self.counts = spec, state, counts
        self.first_id, self.domain_state = first_id, domain_state
        self.words = sorted(counts)
        self.base = Segmenter(state)(self.words)
        self.max_iterations = max_iterations
        self.floors = floors or {}
        """Token → the most uses it ever needs (a glossary term's evidence of its own), whatever ``min_count``."""

    def needs(self, token: str, min_count: int) -> int:
        """The uses ``token`` needs to stay at threshold ``min_count``."""
        return min(min_count, self.floors.get(token, min_count))

    def evidence(self, chosen: dict[str, list[str]]) -> Evidence:
        trial = copy.deepcopy(self.state)
        entries = self.spec.insert(trial["model"], chosen, self.first_id, self.domain_state)
        return evidence(self.words, self.counts, self.base, Segmenter(trial)(self.words), set(entries))

    def settle(self, selection: Selection, min_count: int, max_tokens: int | None = None) -> Selection:
        """Drop, until none is left to drop, the tokens that save nothing or are used fewer than
        ``min_count`` times, then those beyond ``max_tokens`` (the least saving first)."""
        chosen, rejected = dict(selection.tokens), dict(selection.rejected)
        rejected_uses, iterations = dict(selection.rejected_uses), selection.iterations
        while True:
            iterations += 1
            if iterations > self.max_iterations:
                raise RuntimeError(f"token selection did not settle in {self.max_iterations} iterations")
            ev = self.evidence(chosen)
            drop = {t: "no_saving" if ev.saves_nothing(t) else "rare" for t in chosen
                    if ev.saves_nothing(t) or ev.uses[t] < self.needs(t, min_count)}
            if not drop and max_tokens is not None and len(chosen) > max_tokens:
                ranked = sorted(chosen, key=lambda t: (-ev.saved[t], t))
                drop = {t: "cap" for t in ranked[max_tokens:]}
            if not drop:
                return Selection(chosen, rejected, rejected_uses, {t: ev.uses[t] for t in chosen},
                                 {t: ev.saved[t] for t in chosen}, iterations, min_count)
            rejected.update(drop)
            rejected_uses.update({t: ev.uses[t] for t in drop})
            chosen = {t: p for t, p in chosen.items() if t not in drop}

    def ladder(self, candidates: dict[str, list[str]], thresholds: list[int]) -> list[Selection]:
        """The selection at each of the increasing ``thresholds``, each settled from the one before:
        rare tokens go first, so a token's uses at a high threshold are counted without the
        fragments that a lower one already removed (the domain trainer's tie-breaking varies
        between runs, huggingface/tokenizers#1794, in exactly such rare fragments)."""
        words = {t: p for t, p in candidates.items() if self.is_word(t)}
        rejected = {t: "not_a_word" for t in candidates if t not in words}
        out, current = [], Selection(words, rejected, {}, {}, {}, 0, 0)
        for threshold in sorted(thresholds):
            current = self.settle(current, threshold)
            out.append(current)
        return out


def select_tokens(spec, state: dict, candidates: dict[str, list[str]], counts: Counter, first_id: int,
                  domain_state: dict, min_count: int = 1, max_tokens: int | None = None) -> Selection:
    """Select among ``candidates`` (token → base pieces) by their evidence on ``counts`` (see the
    module docstring), climbing to ``min_count`` through :data:`LADDER`. ``spec`` inserts tokens
    into a copy of the base tokenizer ``state`` exactly as stage 1 will, so the evidence is that
    of the tokenizer stage 1 writes."""
    selector = Selector(spec, state, counts, first_id, domain_state)
    steps = [t for t in LADDER if t < min_count] + [min_count]
    return selector.settle(selector.ladder(candidates, steps)[-1], min_count, max_tokens)


LADDER = (1, 2, 3, 5, 10, 20, 50, 100, 200, 500)
"""Minimum-use thresholds the selection climbs through (and the report compares)."""
