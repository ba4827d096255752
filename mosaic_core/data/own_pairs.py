"""A user's own (query, document) pairs → the rows PubMed pairs become: text normalised, the
length and (optional) language filters applied, every dropped row counted by reason."""

from __future__ import annotations

import re
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

from mosaic_core.config import OwnPairsConfig
from mosaic_core.data import langid
from mosaic_core.versioning import code_version

_SPACE = re.compile(r"\s+")
REASONS = ("missing_query", "missing_document", "non_text_query", "non_text_document", "short_query",
           "short_document", "long_document", "language")


def normalise(text: str) -> str:
    """NFC, every run of whitespace (newlines, tabs, non-breaking spaces) one space, trimmed."""
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def pair_row(query: object, document: object, cfg: OwnPairsConfig) -> tuple[str, str, str | None, str | None]:
    """(query, document, drop reason or None, detected language or None) of one row."""
    for name, value in (("query", query), ("document", document)):
        if value is None:
            return "", "", f"missing_{name}", None
        if not isinstance(value, str):
            return "", "", f"non_text_{name}", None
    q, d = normalise(query), normalise(document)
    n_query, n_doc = len(q.split()), len(d.split())
    if not q:
        return "", "", "missing_query", None
    if not d:
        return "", "", "missing_document", None
    if n_query < cfg.min_query_words:
        return "", "", "short_query", None
    if n_doc < cfg.min_document_words:
        return "", "", "short_document", None
    if n_doc > cfg.max_document_words:
        return "", "", "long_document", None
    if cfg.keep_languages is None:
        return q, d, None, None
    language = langid.detect_language(f"{q} {d}")
    return (q, d, None, language) if language in cfg.keep_languages else ("", "", "language", language)


@dataclass
class PairStats:
    """What the rows of a source came to: read, kept, dropped by reason."""

    rows: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)

    def add(self, reason: str | None) -> None:
        self.rows += 1
        if reason is None:
            self.kept += 1
        else:
            self.dropped[reason] += 1


CODE_VERSION = code_version(sys.modules[__name__])
"""Digest of these rules (and language id): part of the import's cache key and manifests."""
