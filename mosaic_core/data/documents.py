"""Documents → passages → (query, document) pairs, without a model: title → passage, inverse cloze
(Lee et al. 2019: a sentence → the passage around it) and independent cropping (Izacard et al.
2022, Contriever: two random spans of one passage). Pure and deterministic: every random choice
comes from a generator seeded by (seed, builder, doc_id), so a document's pairs do not depend on
the other documents, their order or how they are batched. Generated queries are
:mod:`mosaic_core.data.query_gen`'s."""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from mosaic_core.config_documents import DocumentsConfig
from mosaic_core.data.own_pairs import normalise

MIN_QUERY_WORDS = 3
"""An inverse-cloze query is a sentence of at least this many words ("Fig. 2." is none)."""

_PARAGRAPHS = re.compile(r"\n\s*\n")
# A sentence ends at . ! ? … (and any closing quotes or brackets) before a space; not where the
# next word starts in lower case ("et al. found", "e.g. the").
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*(?= +(\S))")


class Passage(NamedTuple):
    """One passage of a document: its sentences, in order (``text`` joins them)."""

    doc_id: str
    index: int
    title: str | None
    sentences: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


class Pair(NamedTuple):
    """A built (query, document) pair: which builder made it, of which document; ``score`` is a
    cross-encoder's (generated queries only)."""

    query: str
    document: str
    builder: str
    doc_id: str
    score: float | None = None


@dataclass
class BuildStats:
    """What documents came to: passages kept and dropped, pairs made and skipped per builder and
    reason."""

    documents: int = 0
    passages: int = 0
    dropped: Counter = field(default_factory=Counter)
    made: Counter = field(default_factory=Counter)
    skipped: defaultdict = field(default_factory=lambda: defaultdict(Counter))

    def as_dict(self) -> dict:
        return {"documents": self.documents, "passages": self.passages, "dropped": dict(self.dropped),
                "made": dict(self.made), "skipped": {b: dict(c) for b, c in sorted(self.skipped.items()) if c}}


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, whitespace normalised; a blank line always ends one."""
    out = []
    for paragraph in _PARAGRAPHS.split(text):
        paragraph = normalise(paragraph)
        start = 0
        for m in _SENTENCE_END.finditer(paragraph):
            if m.group(1)[0].islower():
                continue
            out.append(paragraph[start:m.end()].strip())
            start = m.end() + 1
        out.append(paragraph[start:].strip())
    return [s for s in out if s]


def chunk(text: str, passage_words: int, min_passage_words: int = 1) -> tuple[list[tuple[str, ...]], int]:
    """(passages of ``text`` as tuples of sentences, passages dropped as shorter than
    ``min_passage_words``). Sentences are packed in order while a passage stays within
    ``passage_words`` words; a sentence longer than that is cut between words into pieces of
    ``passage_words``. A short last passage joins the one before it (which may then run over by
    fewer than ``min_passage_words``), so only a document that short as a whole is dropped."""
    pieces = []
    for sentence in split_sentences(text):
        words = sentence.split()
        pieces += [" ".join(words[i:i + passage_words]) for i in range(0, len(words), passage_words)]
    passages: list[list[str]] = []
    size = passage_words + 1  # no passage open yet
    for piece in pieces:
        n = len(piece.split())
        if size + n > passage_words:
            passages.append([])
            size = 0
        passages[-1].append(piece)
        size += n
    if len(passages) > 1 and _words(passages[-1]) < min_passage_words:
        tail = passages.pop()
        passages[-1] += tail
    kept = [tuple(p) for p in passages if _words(p) >= min_passage_words]
    return kept, len(passages) - len(kept)


def _words(sentences: list[str] | tuple[str, ...]) -> int:
    return sum(len(s.split()) for s in sentences)


def passages_of(doc_id: str, title: str | None, text: str, cfg: DocumentsConfig, stats: BuildStats) -> list[Passage]:
    """The passages of one document (:func:`chunk` at the config's sizes), counted into ``stats``."""
    chunks, dropped = chunk(text, cfg.passage_words, cfg.min_passage_words)
    stats.documents += 1
    stats.passages += len(chunks)
    if dropped:
        stats.dropped["short_passage"] += dropped
    title = normalise(title) if isinstance(title, str) else None
    return [Passage(doc_id, i, title or None, sentences) for i, sentences in enumerate(chunks)]


def rng_for(seed: int, builder: str, doc_id: str) -> random.Random:
    """The random generator of one document and builder: the same for the same three, whatever
    else is built, and in whatever order."""
    digest = hashlib.sha256(f"{seed}\0{builder}\0{doc_id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def title_pairs(passages: list[Passage], each: bool, stats: BuildStats) -> list[Pair]:
    """(title, passage) for the document's first passage, or for each one when ``each``; nothing
    (counted as ``no_title``) for a document without a title."""
    if not passages:
        return []
    title = passages[0].title
    if title is None:
        stats.skipped["title"]["no_title"] += 1
        return []
    pairs = [Pair(title, p.text, "title", p.doc_id) for p in (passages if each else passages[:1])]
    stats.made["title"] += len(pairs)
    return pairs


def ict_pairs(passages: list[Passage], rng: random.Random, keep_probability: float, per_passage: int,
              stats: BuildStats) -> list[Pair]:
    """Inverse cloze: per passage, ``per_passage`` of its sentences (distinct, of at least
    :data:`MIN_QUERY_WORDS` words) as queries, each with the passage as its document: without the
    sentence, or with it at ``keep_probability``. A passage of one sentence (``one_sentence``) or
    none long enough (``short_sentences``) is skipped and counted."""
    pairs = []
    for p in passages:
        if len(p.sentences) < 2:
            stats.skipped["ict"]["one_sentence"] += 1
            continue
        candidates = [i for i, s in enumerate(p.sentences) if len(s.split()) >= MIN_QUERY_WORDS]
        if not candidates:
            stats.skipped["ict"]["short_sentences"] += 1
            continue
        for i in rng.sample(candidates, min(per_passage, len(candidates))):
            keep = rng.random() < keep_probability
            document = p.text if keep else " ".join(s for j, s in enumerate(p.sentences) if j != i)
            pairs.append(Pair(p.sentences[i], document, "ict", p.doc_id))
    stats.made["ict"] += len(pairs)
    return pairs


def crop_bounds(n_words: int, min_ratio: float, max_ratio: float) -> tuple[int, int]:
    """The shortest and longest span, in words, cropping takes of a passage of ``n_words``."""
    low = max(1, math.ceil(min_ratio * n_words))
    return low, max(low, math.floor(max_ratio * n_words))


def crop_pairs(passages: list[Passage], rng: random.Random, min_ratio: float, max_ratio: float, per_passage: int,
               stats: BuildStats) -> list[Pair]:
    """Independent cropping: per passage, ``per_passage`` pairs of two contiguous spans of its
    words drawn independently (each of a length uniform in :func:`crop_bounds`, at a uniform start;
    they may overlap). Two identical spans are no pair (``identical``)."""
    pairs = []
    for p in passages:
        words = p.text.split()
        low, high = crop_bounds(len(words), min_ratio, max_ratio)
        for _ in range(per_passage):
            spans = []
            for _ in range(2):
                length = rng.randint(low, high)
                start = rng.randint(0, len(words) - length)
                spans.append(" ".join(words[start:start + length]))
            if spans[0] == spans[1]:
                stats.skipped["crop"]["identical"] += 1
                continue
            pairs.append(Pair(spans[0], spans[1], "crop", p.doc_id))
    stats.made["crop"] += len(pairs)
    return pairs


def rule_pairs(passages: list[Passage], cfg: DocumentsConfig, stats: BuildStats) -> list[Pair]:
    """The pairs of one document's passages by every builder in ``cfg.builders`` that needs no model
    (title, ict, crop), in that order; "generated" is :func:`mosaic_core.data.query_gen.generated_pairs`'s."""
    if not passages:
        return []
    doc_id = passages[0].doc_id
    pairs: list[Pair] = []
    for builder in cfg.builders:
        if builder == "title":
            pairs += title_pairs(passages, cfg.title_passages == "each", stats)
        elif builder == "ict":
            pairs += ict_pairs(passages, rng_for(cfg.seed, builder, doc_id), cfg.ict_keep_probability,
                               cfg.pairs_per_passage, stats)
        elif builder == "crop":
            pairs += crop_pairs(passages, rng_for(cfg.seed, builder, doc_id), cfg.crop_min_ratio,
                                cfg.crop_max_ratio, cfg.pairs_per_passage, stats)
    return pairs


def document_pairs(document: tuple[str, str | None, str], cfg: DocumentsConfig,
                   stats: BuildStats) -> tuple[list[Passage], list[Pair]]:
    """(the passages, the model-free pairs) of one ``(doc_id, title or None, text)`` document, as
    :mod:`storage.documents` reads them."""
    doc_id, title, text = document
    passages = passages_of(doc_id, title, text, cfg, stats)
    return passages, rule_pairs(passages, cfg, stats)
