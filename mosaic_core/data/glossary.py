"""A domain's glossary: terms with their definitions (and optional synonyms and example
sentences), and the text a run builds from it (seed 003, "Teaching Embedding Models New Words",
experiment 4: what teaches a model a new word is text that defines it).

* :func:`glossary_entry` reads one record of a table (JSONL, CSV, TSV, Parquet) and
  :func:`mesh_entries` the descriptors of NLM's MeSH XML (``descYYYY.xml``: DescriptorName,
  the preferred concept's ScopeNote, the entry terms), streamed; a record that cannot be an
  entry is counted by its reason (:data:`REASONS`), never silently dropped.
* :func:`dictionary_texts`: dictionary-style text, each entry written in templates
  (``TERM: DEFINITION``, ``TERM, also called SYNONYM, ...``), seeded; the dictionary stage
  trains the domain-restricted MLM on it.
* :func:`definition_pairs`: (query, document) pairs that join the training pairs of both
  arms (term → definition; a synonym or a question about the term → its definition).
* :func:`single_words`: the terms and synonyms that are one word, as the tokenizer's
  pre-tokenizer sees them: stage 1's glossary candidates.
* :func:`used_entries`: the entries the corpus names (a glossary such as MeSH holds tens of
  thousands of terms, most of them foreign to a given corpus).
"""

from __future__ import annotations

import random
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from mosaic_core.versioning import code_version

REASONS = ("missing_term", "missing_definition", "non_text", "long_term", "duplicate_term", "no_scope_note")
"""Why a record is not an entry: no term, no definition, a cell that is not text (or a list of
texts), a term longer than :data:`MAX_TERM_WORDS` words, a term already defined above, a MeSH
descriptor whose preferred concept has no scope note."""
MAX_TERM_WORDS = 12
_SPACE = re.compile(r"\s+")
_LIST_SEPARATORS = re.compile(r"\s*[;|]\s*")


@dataclass(frozen=True)
class GlossaryEntry:
    """A term, what it means, other names for it and sentences that use it."""

    term: str
    definition: str
    synonyms: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The term, then its synonyms."""
        return (self.term, *self.synonyms)


def _clean(text: str) -> str:
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def _texts(cell: object) -> tuple[str, ...] | None:
    """A cell of synonyms or examples: a list of texts, or one text whose items are separated by
    ``;`` or ``|``; ``None`` when it is neither."""
    if cell is None:
        return ()
    if isinstance(cell, str):
        return tuple(t for t in (_clean(p) for p in _LIST_SEPARATORS.split(cell)) if t)
    if isinstance(cell, (list, tuple)) and all(isinstance(t, str) for t in cell):
        return tuple(t for t in (_clean(p) for p in cell) if t)
    return None


def glossary_entry(term: object, definition: object, synonyms: object = None,
                   examples: object = None) -> tuple[GlossaryEntry | None, str | None]:
    """(the entry, None) of one record, or (None, the reason it is not one: :data:`REASONS`).
    Text is NFC-normalised, whitespace runs become one space; synonyms equal to the term (in any
    case) are left out, and duplicates among them."""
    if term is None or (isinstance(term, str) and not term.strip()):
        return None, "missing_term"
    if definition is None or (isinstance(definition, str) and not definition.strip()):
        return None, "missing_definition"
    names, uses = _texts(synonyms), _texts(examples)
    if not isinstance(term, str) or not isinstance(definition, str) or names is None or uses is None:
        return None, "non_text"
    term = _clean(term)
    if len(term.split()) > MAX_TERM_WORDS:
        return None, "long_term"
    seen = {term.lower()}
    kept = []
    for name in names:
        if name.lower() not in seen:
            seen.add(name.lower())
            kept.append(name)
    return GlossaryEntry(term, _clean(definition), tuple(kept), uses), None


class NotAGlossary(ValueError):
    """A file that is no glossary of the kind it was read as (its root, its columns)."""


MESH_ROOT = "DescriptorRecordSet"


def mesh_entries(stream: BinaryIO, where: str) -> Iterator[tuple[GlossaryEntry | None, str | None]]:
    """(entry, None) or (None, reason) per ``DescriptorRecord`` of a MeSH descriptor file
    (``descYYYY.xml``), streamed (each record is cleared once read): the term is the
    DescriptorName, the definition the preferred concept's ScopeNote, the synonyms every entry
    term of every concept that is not a permuted form (``A23187, Antibiotic``). ``where`` names
    the file in a :class:`NotAGlossary` raised when its root is not ``DescriptorRecordSet``."""
    from lxml import etree

    root_seen = False
    for event, element in etree.iterparse(stream, events=("start", "end"), resolve_entities=False,
                                          no_network=True, huge_tree=True):
        if not root_seen:
            if element.tag != MESH_ROOT:
                raise NotAGlossary(f"{where}: the root element is <{element.tag}>, not <{MESH_ROOT}>: not a MeSH "
                                   "descriptor file (descYYYY.xml from NLM); a glossary table is JSONL, CSV or TSV "
                                   "with term and definition columns")
            root_seen = True
            continue
        if event != "end" or element.tag != "DescriptorRecord":
            continue
        term = element.findtext("DescriptorName/String")
        note = element.findtext("ConceptList/Concept[@PreferredConceptYN='Y']/ScopeNote")
        synonyms = [t.findtext("String") for t in element.iterfind("ConceptList/Concept/TermList/Term")
                    if t.get("IsPermutedTermYN") != "Y"]
        element.clear()
        while element.getprevious() is not None:  # what iterparse kept of the records before
            del element.getparent()[0]
        if term and not (note or "").strip():
            yield None, "no_scope_note"
            continue
        yield glossary_entry(term, note, [s for s in synonyms if s])


def dedupe(records: Iterable[tuple[GlossaryEntry | None, str | None]],
           dropped: dict[str, int]) -> Iterator[GlossaryEntry]:
    """The entries of ``records`` in order, the first of each term (case-insensitive) only; every
    record that is not kept is counted in ``dropped`` by its reason."""
    seen: set[str] = set()
    for entry, reason in records:
        if entry is not None and entry.term.lower() in seen:
            entry, reason = None, "duplicate_term"
        if entry is None:
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        seen.add(entry.term.lower())
        yield entry


SYNONYM_TEMPLATE = "{term}, also called {synonym}: {definition}"
EXAMPLE_TEMPLATE = "{term} is used in contexts such as: {example}"


def _rng(seed: int, *parts: str) -> random.Random:
    return random.Random("\x1f".join([str(seed), *parts]))


def dictionary_texts(entries: Iterable[GlossaryEntry], templates: tuple[str, ...], per_entry: int,
                     seed: int) -> Iterator[tuple[str, str]]:
    """(term, text) dictionary-style texts: per entry ``per_entry`` texts drawn from
    ``templates`` (each used once before any is used again) with the term or one of its
    synonyms, plus one text naming each synonym beside the term and one per example sentence.
    Deterministic: a function of the entry and ``seed`` alone, whatever entries come before."""
    for entry in entries:
        rng = _rng(seed, entry.term)
        order: list[str] = []
        while len(order) < per_entry:
            order += rng.sample(templates, len(templates))
        for template in order[:per_entry]:
            yield entry.term, template.format(term=rng.choice(entry.names), definition=entry.definition)
        for synonym in entry.synonyms:
            yield entry.term, SYNONYM_TEMPLATE.format(term=entry.term, synonym=synonym, definition=entry.definition)
        for example in entry.examples:
            yield entry.term, EXAMPLE_TEMPLATE.format(term=entry.term, example=example)


def definition_pairs(entries: Iterable[GlossaryEntry], questions: tuple[str, ...], per_entry: int,
                     seed: int) -> Iterator[tuple[str, str]]:
    """(query, document) pairs whose document is an entry's definition, ``per_entry`` of them per
    entry: the term itself first, then drawn (seeded per entry) from its synonyms and a question
    about it (one of ``questions`` naming the term or a synonym)."""
    for entry in entries:
        rng = _rng(seed, "pairs", entry.term)
        others = list(entry.synonyms)
        if questions:
            others.append(rng.choice(questions).format(term=rng.choice(entry.names)))
        for query in [entry.term, *rng.sample(others, min(len(others), per_entry - 1))][:per_entry]:
            yield query, entry.definition


_WORD = re.compile(r"\w+")


def _words(text: str) -> tuple[str, ...]:
    return tuple(w.lower() for w in _WORD.findall(text))


def used_entries(entries: list[GlossaryEntry], texts: Iterable[str]) -> list[GlossaryEntry]:
    """The entries, in order, whose term or a synonym occurs in ``texts`` as whole words
    (case-insensitive): one pass over the texts, each word looked up among the names that start
    with it."""
    by_first: dict[str, list[tuple[tuple[str, ...], int]]] = {}
    for i, entry in enumerate(entries):
        for name in entry.names:
            if words := _words(name):
                by_first.setdefault(words[0], []).append((words, i))
    used: set[int] = set()
    for text in texts:
        words = _words(text)
        for k, word in enumerate(words):
            for name, i in by_first.get(word, ()):
                if i not in used and words[k:k + len(name)] == name:
                    used.add(i)
    return [e for i, e in enumerate(entries) if i in used]


def single_words(entries: Iterable[GlossaryEntry], pre_tokenize) -> dict[str, GlossaryEntry]:
    """The names (terms and synonyms) that ``pre_tokenize`` (``text -> list of words``, as the
    tokenizer's normalizer and pre-tokenizer give them) reads as one word → their entry; the
    first entry naming a word keeps it."""
    out: dict[str, GlossaryEntry] = {}
    for entry in entries:
        for name in entry.names:
            words = pre_tokenize(name)
            if len(words) == 1:
                out.setdefault(words[0], entry)
    return out


CODE_VERSION = code_version(sys.modules[__name__])
"""Digest of these rules: part of the glossary's cache key."""
