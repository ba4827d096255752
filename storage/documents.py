"""A domain's documents (no pairs), streamed from whatever they are kept in, and the pairs built of
them written to one file.

A source is what :mod:`storage.own_pairs` reads (a file, folder or glob of JSONL/JSON, Parquet or
CSV/TSV files, compressed or not, a ``save_to_disk`` folder, a hub dataset), and also .txt/.md
files, one document each. Documents come in batches of ``(doc_id, title or None, text)``; memory
holds one batch (and one text file). Records without usable text are counted by reason, never
silently lost; what makes a source unusable is a :class:`~storage.pairs_io.CorpusError` naming
the file and what to do.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from storage.own_pairs import _kind, file_batches, require_columns, source_files
from storage.pairs_io import CorpusError, open_binary, write_jsonl
from storage.parquet import write_partition

log = logging.getLogger(__name__)

BATCH_DOCUMENTS = 1000
"""Documents per batch :func:`iter_documents` yields."""
MAX_TEXT_BYTES = 64 << 20
"""A .txt/.md file larger than this (64 MiB, decompressed) is skipped as ``too_long``: it is read
whole, as one document, and no document worth cutting into passages is that long."""
Document = tuple[str, str | None, str]
"""(doc_id, title or None, text)."""
TEXT_COLUMN_HINT = ("set source.text_column to the column holding the text (with --documents: "
                    "--set source.text_column=NAME)")


@dataclass
class DocumentStats:
    """What a source's records came to: files read, documents yielded, records skipped by reason
    (``missing_text``: none or no such key; ``empty_text``: blank; ``non_text``: a number, a list…;
    ``invalid_json``, ``too_long``, ``not_utf8``: unreadable)."""

    files: int = 0
    documents: int = 0
    skipped: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict:
        return {"files": self.files, "documents": self.documents, "skipped": dict(sorted(self.skipped.items()))}


def check_documents(source: str, text_column: str = "text", base: Path | None = None) -> list[Path]:
    """The files of ``source`` (relative to ``base`` when given) after checking that each can be
    read and that every structured one has ``text_column``; a :class:`CorpusError` naming the file,
    and the columns it has, otherwise."""
    files = source_files(source, base, what="documents", text=True)
    for path in files:
        if _kind(path, text=True) != "text":
            require_columns(path, (text_column,), "documents", TEXT_COLUMN_HINT)
    return files


def iter_documents(files: list[Path], text_column: str = "text", title_column: str | None = "title",
                   id_column: str | None = "id", *, title_from_first_line: bool = False,
                   max_documents: int | None = None, stats: DocumentStats | None = None,
                   batch_size: int = BATCH_DOCUMENTS) -> Iterator[list[Document]]:
    """Batches of ``(doc_id, title or None, text)`` of ``files`` (as :func:`check_documents`
    returns them) in order, at most ``max_documents`` in all. A structured file's title and id come
    from ``title_column``/``id_column`` where it has them; a document without an id is named by its
    file (relative to the files' common folder) and row number, ``notes/a.txt`` or
    ``data.jsonl:17``. A text file's title is its first line when ``title_from_first_line``.
    Skipped records are counted into ``stats`` and logged once at the end; a source that yields
    no document at all is a :class:`CorpusError`."""
    stats = DocumentStats() if stats is None else stats
    root = Path(os.path.commonpath([f.parent for f in files])) if files else Path()
    batch: list[Document] = []
    n = 0
    for path in files:
        stats.files += 1
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
        if _kind(path, text=True) == "text":
            rows = _text_file(path, name, title_from_first_line, stats.skipped)
        else:
            rows = _table_rows(path, name, (text_column, title_column, id_column), stats.skipped)
        for doc in rows:
            batch.append(doc)
            stats.documents += 1
            n += 1
            if len(batch) == batch_size or n == max_documents:
                yield batch
                batch = []
            if n == max_documents:
                _report(files, stats, n)
                return
    if batch:
        yield batch
    _report(files, stats, n)


def _report(files: list[Path], stats: DocumentStats, n: int) -> None:
    where = f"{files[0]}" + (f" and {len(files) - 1} other file(s)" if len(files) > 1 else "") if files else "documents"
    if n == 0:
        why = f"every record was skipped ({dict(stats.skipped)})" if stats.skipped else "they hold no record"
        raise CorpusError(f"{where}: no documents to read: {why}. Pass documents with their text in the text column "
                          "(source.text_column), or .txt/.md files")
    if stats.skipped:
        log.warning("%s: skipped %d record(s) without usable text (%s); read %d document(s)", where,
                    sum(stats.skipped.values()), ", ".join(f"{k}: {v}" for k, v in sorted(stats.skipped.items())),
                    n)


def _text_reason(value: object) -> str | None:
    if value is None:
        return "missing_text"
    if not isinstance(value, str):
        return "non_text"
    return None if value.strip() else "empty_text"


def _text_file(path: Path, name: str, title_from_first_line: bool, skipped: Counter) -> Iterator[Document]:
    """The one document of a .txt/.md file (nothing, counted, when it has no usable text)."""
    try:
        with open_binary(path) as fh:
            raw = fh.read(MAX_TEXT_BYTES + 1)
    except OSError as exc:
        raise CorpusError(f"{path}: cannot be read: {exc}") from exc
    if len(raw) > MAX_TEXT_BYTES:
        skipped["too_long"] += 1
        return
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        skipped["not_utf8"] += 1
        return
    title = None
    if title_from_first_line:
        first, _, text = text.lstrip().partition("\n")
        title = first.strip().lstrip("#").strip() or None  # a Markdown heading's marks are no part of it
    if reason := _text_reason(text):
        skipped[reason] += 1
        return
    yield name, title, text


def _table_rows(path: Path, name: str, columns: tuple[str, str | None, str | None],
                skipped: Counter) -> Iterator[Document]:
    """The documents of a structured file; the title and id columns are read where the file has them."""
    text_column, title_column, id_column = columns
    present = require_columns(path, (text_column,), "documents", TEXT_COLUMN_HINT)
    wanted = (text_column, *(c for c in (title_column, id_column) if c is not None and c in present))
    has_title = title_column is not None and title_column in present
    has_id = id_column is not None and id_column in present
    bad: dict[str, int] = {}
    row = 0
    for batch in file_batches(path, wanted, bad):
        for cells in batch:
            row += 1
            text = cells[0]
            if reason := _text_reason(text):
                skipped[reason] += 1
                continue
            title = cells[1] if has_title else None
            doc_id = cells[-1] if has_id else None
            yield (f"{name}:{row}" if doc_id is None else str(doc_id),
                   title if isinstance(title, str) and title.strip() else None, text)
    skipped.update(bad)


PAIR_SCHEMA = pa.schema([("query", pa.string()), ("document", pa.string()), ("builder", pa.string()),
                         ("doc_id", pa.string()), ("score", pa.float64())])
"""The columns of a built-pairs file (``score``: the cross-encoder's, null where none)."""
_PAIR_KEYS = ("query", "document", "builder", "doc_id")


def write_pairs(path: Path, pairs: Iterable[Mapping[str, object]]) -> dict[str, int]:
    """Write built pairs (mappings, or named tuples, with ``query``, ``document``, ``builder``,
    ``doc_id`` and optionally ``score``), streamed, to ``path``: JSON Lines, or Parquet when its name ends in
    ``.parquet``. Atomic: written to a temporary file beside it and renamed into place when
    complete, so a rerun replaces the file and a crash leaves the old one (or none). Returns how
    many pairs each builder made, in the order builders first appear."""
    counts: Counter = Counter()

    def rows() -> Iterator[dict]:
        for pair in pairs:
            pair = pair._asdict() if hasattr(pair, "_asdict") else pair  # a NamedTuple
            row = {k: pair[k] for k in _PAIR_KEYS}
            if pair.get("score") is not None:
                row["score"] = float(pair["score"])
            counts[row["builder"]] += 1
            yield row

    if path.suffix == ".parquet":
        write_partition(path, PAIR_SCHEMA, _chunks(rows(), 10_000))
        return dict(counts)
    write_jsonl(path, rows())
    return dict(counts)


def _chunks(rows: Iterator[dict], size: int) -> Iterator[list[dict]]:
    chunk: list[dict] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
