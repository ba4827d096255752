"""Citations → (query, document) pairs with every dropped record counted by reason.

Query = title, optionally followed by the journal title and author keywords (docs/method.md: "metadata
such as journal name and keywords were appended to the title"); document = the abstract.

Language filter (the PubMed quirk): for a non-English article PubMed gives an English
translation of the title in square brackets and the original in ``VernacularTitle``, and
``<Language>`` names the article's language, not that of the English fields. We therefore
decide on the text we will train on: the (unbracketed) title plus the abstract, run through
:func:`mosaic_core.data.langid.detect_language`. An Italian article with an English abstract is
kept; one whose abstract is Italian is dropped as ``not_english`` (or whatever the config keeps).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from mosaic_core.config import PairConfig
from mosaic_core.data import langid, pubmed
from mosaic_core.versioning import code_version


class DropReason(str, Enum):
    """Why a citation did not become a training pair (first failing check wins)."""

    MALFORMED = "malformed_record"
    NO_TITLE = "missing_title"
    NO_ABSTRACT = "missing_abstract"
    SHORT_TITLE = "short_title"
    SHORT_ABSTRACT = "short_abstract"
    LONG_ABSTRACT = "long_abstract"
    LANGUAGE = "language"


_BRACKETED = re.compile(r"^\[(.+)\](\.?)$")


def clean_title(title: str, strip_brackets: bool) -> tuple[str, bool]:
    """Return (title used for training, whether it was a bracketed translation)."""
    m = _BRACKETED.match(title.strip())
    if m is None:
        return title.strip(), False
    return ((m.group(1) + m.group(2)) if strip_brackets else title.strip()), True


def build_query(title: str, journal: str, keywords: list[str], cfg: PairConfig) -> str:
    parts = [title]
    if cfg.append_journal and journal:
        parts.append(journal)
    if cfg.append_keywords and keywords:
        parts.append(", ".join(k for k in keywords if k))
    return " ".join(parts)


def citation_row(c: pubmed.Citation, cfg: PairConfig) -> dict:
    """One output row: the parsed fields, the pair, the detected language and the drop reason."""
    title, translated = clean_title(c.title, cfg.strip_title_brackets)
    document = c.abstract(prefix_labels=cfg.prefix_abstract_labels)
    n_title, n_doc = len(title.split()), len(document.split())
    language = None
    if not title:
        reason = DropReason.NO_TITLE
    elif not document:
        reason = DropReason.NO_ABSTRACT
    elif n_title < cfg.min_title_words:
        reason = DropReason.SHORT_TITLE
    elif n_doc < cfg.min_abstract_words:
        reason = DropReason.SHORT_ABSTRACT
    elif n_doc > cfg.max_abstract_words:
        reason = DropReason.LONG_ABSTRACT
    else:
        # Journal names and keywords are excluded: many English articles appear in journals
        # with non-English names, which would mislead the detector.
        language = langid.detect_language(
            f"{title} {document}", seed=cfg.language_seed, prefix_chars=cfg.language_prefix_chars
        )
        reason = None if language in cfg.keep_languages else DropReason.LANGUAGE
    return {
        "pmid": c.pmid,
        "version": c.version,
        "record_index": c.record_index,
        "title": c.title,
        "abstract_sections": c.abstract_sections,
        "abstract_labels": c.abstract_labels,
        "journal": c.journal,
        "keywords": c.keywords,
        "mesh_headings": c.mesh_headings,
        "publication_types": c.publication_types,
        "languages": c.languages,
        "vernacular_title": c.vernacular_title,
        "pub_date": c.pub_date,
        "pub_year": c.pub_year,
        "title_translated": translated,
        "detected_language": language,
        "query": build_query(title, c.journal, c.keywords, cfg) if reason is None else "",
        "document": document if reason is None else "",
        "drop_reason": reason.value if reason is not None else None,
    }


@dataclass
class FileStats:
    """What one source file produced; filled while :func:`iter_rows` streams."""

    records: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    malformed_examples: list[str] = field(default_factory=list)
    deleted_pmids: list[int] = field(default_factory=list)
    error: str | None = None

    def as_counts(self) -> dict[str, int]:
        return {reason.value: self.dropped.get(reason.value, 0) for reason in DropReason}


def iter_rows(
    path: str | Path, cfg: PairConfig, stats: FileStats, batch_rows: int = 5000
) -> Iterator[list[dict]]:
    """Stream a PubMed XML file as batches of :func:`citation_row` dicts.

    A truncated/malformed file ends the stream early *without raising*: every row parsed
    before the fault is yielded and ``stats.error`` says what broke, so the caller can
    store the good part and then fail the file loudly.
    """
    deleted = pubmed.DeletedPmids(stats.deleted_pmids)
    batch: list[dict] = []
    try:
        for c in pubmed.iter_citations(path, deleted):
            stats.records += 1
            if isinstance(c, pubmed.MalformedCitation):
                stats.dropped[DropReason.MALFORMED.value] += 1
                if len(stats.malformed_examples) < 20:
                    stats.malformed_examples.append(f"record #{c.record_index}: {c.reason}")
                continue
            row = citation_row(c, cfg)
            if row["drop_reason"] is None:
                stats.kept += 1
            else:
                stats.dropped[row["drop_reason"]] += 1
            batch.append(row)
            if len(batch) >= batch_rows:
                yield batch
                batch = []
    except pubmed.PubmedParseError as exc:
        stats.error = str(exc)
    if batch:
        yield batch


CODE_VERSION = code_version(sys.modules[__name__])  # and all it imports: the parser, language id
"""Digest of the parser, language and pair code: part of every ingest cache key and manifest."""
