"""Training examples on disk: one Arrow IPC file per pairs source, which a training stage memory-maps.

Layout (:data:`SCHEMA`): ``query`` and ``document`` (large_string), and ``negatives``
(list<int64>): the rows of the same file whose documents are hard negatives of the row's query,
so a document text is held once however many queries it is a negative of. The pairs come first,
in the source's order (a pairs file: file order; a data root: its filtered pairs by source file
and pair id, else its latest pairs by file and PMID). Rows after them have no query: documents
that are only negatives (a negative column's text that is no pair's document, kept once; a
document the consistency filter dropped). A negative text is matched to a pair's document by
an 8-byte BLAKE2b content hash; the first pair holding that document is the reference.

A pairs file is converted once into a work folder and converted again only when its bytes or
the columns change; the conversion streams (one batch of rows in memory at a time) in two
passes: usable rows with their negative texts to a temporary file, then the negative texts to
row numbers. A data root's examples come from DuckDB in record batches, the row numbers
computed in SQL. An ``.arrow`` examples file (mined hard negatives, ``tasks/negatives.py``) is
read as it is. Files are written atomically (temporary file, then rename).
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.catalog import Catalog
from storage.layout import DataLayout
from storage.pairs_io import NEGATIVE_COLUMNS, CorpusError, _is_data_root, _usable, corpus_fingerprint, stream_rows

log = logging.getLogger(__name__)

SCHEMA = pa.schema([pa.field("query", pa.large_string()), pa.field("document", pa.large_string()),
                    pa.field("negatives", pa.list_(pa.int64()))])
"""An examples file's columns (``query`` is null on a row that holds a negative document only)."""

LABELLED = SCHEMA.append(pa.field("margins", pa.list_(pa.float32())))
"""A labelled examples file's columns: :data:`SCHEMA` and, per row, a teacher's margin for each of
its ``negatives`` (``tasks/margins.py``; MarginMSE's labels)."""

_RAW = pa.schema([pa.field("query", pa.large_string()), pa.field("document", pa.large_string()),
                  pa.field("negatives", pa.list_(pa.large_string()))])
"""The conversion's first pass: usable rows, their negatives still texts."""

BATCH_ROWS = 2048
"""Rows per record batch written, and per batch of a pairs file read."""

_FORMAT = b"mosaic.examples"
_FINGERPRINT = b"mosaic.fingerprint"
_SKIPPED = b"mosaic.skipped"
_SPLIT_OF = b"mosaic.split_of"


def examples_file(source: str, query_col: str, doc_col: str, work_dir: Path) -> Path:
    """The examples file of the pairs ``source``: ``source`` itself when it is one (``.arrow``),
    else ``work_dir/<name>-<key>.arrow``, written from the data root or pairs file (columns
    ``query_col``/``doc_col`` and :data:`~storage.pairs_io.NEGATIVE_COLUMNS`) unless it is there
    for the same bytes and columns already."""
    path = Path(source).expanduser()
    if path.suffix == ".arrow":
        _check_format(path)
        return path
    if not path.exists():
        raise CorpusError(f"pairs source {source!r} does not exist: pass a pairs file (.jsonl/.parquet/.csv), a MOSAIC "
                          "data root, or an examples file (.arrow)")
    key = hashlib.sha256(f"{path.resolve()}|{query_col}|{doc_col}".encode()).hexdigest()[:8]
    out = Path(work_dir) / f"{path.name.split('.')[0]}-{key}.arrow"
    fingerprint = f"{corpus_fingerprint(source)}|{query_col}|{doc_col}"
    if out.is_file() and _metadata(out).get(_FINGERPRINT) == fingerprint.encode():
        return out
    if _is_data_root(path):
        with Catalog(DataLayout(path)) as cat:
            cat.refresh()
            reader = cat.training_examples(BATCH_ROWS)
            rows = write_examples(out, (b.cast(SCHEMA) for b in reader), fingerprint=fingerprint)
    elif path.is_file():
        rows = _convert(path, query_col, doc_col, out, fingerprint)
    else:
        raise CorpusError(f"pairs source {source!r} is neither a pairs file nor a MOSAIC data root")
    log.info("%s: %d example rows written to %s", source, rows, out)
    return out


def map_examples(path: Path) -> pa.Table:
    """The examples file ``path`` as a table memory-mapped from disk (zero copy: reading a row
    pages in the file around it, not the table)."""
    return pa.ipc.open_file(pa.memory_map(str(path))).read_all()


def read_batches(path: Path) -> Iterator[pa.RecordBatch]:
    """The record batches of the examples file ``path``, read one at a time (each freed when the
    caller drops it; nothing stays mapped): for passes over every row."""
    with pa.OSFile(str(path)) as fh:
        reader = pa.ipc.open_file(fh)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


def read_blocks(path: Path, rows: int) -> Iterator[pa.Table]:
    """The rows of the examples file ``path`` in consecutive blocks of ``rows`` (the last may be
    shorter), one block in memory at a time."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in read_batches(path):
        while batch.num_rows:
            take = min(rows - held, batch.num_rows)
            pending.append(batch.slice(0, take))
            held, batch = held + take, batch.slice(take)
            if held == rows:
                yield pa.Table.from_batches(pending)
                pending, held = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


def whole(path: Path, schema: pa.Schema = SCHEMA, fingerprint: str | None = None) -> bool:
    """Whether ``path`` is a whole examples file of ``schema``'s columns (:data:`SCHEMA`, or
    :data:`LABELLED` for one with a teacher's margins) written from ``fingerprint`` (what
    :func:`write_examples` was given; None: any): False for a missing, damaged or other one."""
    try:
        with pa.OSFile(str(path)) as fh:
            found = pa.ipc.open_file(fh).schema
    except (pa.ArrowInvalid, OSError):
        return False
    meta = found.metadata or {}
    return (_FORMAT in meta and found.names == schema.names
            and (fingerprint is None or meta.get(_FINGERPRINT) == fingerprint.encode()))


def skipped_rows(path: Path) -> int:
    """Rows of the source the examples file ``path`` was converted from that had no usable query
    or document."""
    return int(_metadata(path).get(_SKIPPED, b"0"))


def split_of(path: Path) -> Path | None:
    """The data root the examples file ``path`` was derived from (:func:`write_examples`), if any."""
    root = _metadata(path).get(_SPLIT_OF)
    return (path.parent / root.decode()).resolve() if root else None


def write_examples(path: Path, batches: Iterable[pa.RecordBatch], skipped: int = 0, fingerprint: str = "",
                   schema: pa.Schema = SCHEMA, split_of: Path | None = None) -> int:
    """Write ``batches`` (``schema``: :data:`SCHEMA` or :data:`LABELLED`) as the examples file
    ``path``, atomically; the row count. ``skipped``: the source's unusable rows; ``fingerprint``:
    what the file was converted from; ``split_of``: the data root whose pairs these are, in its
    order, so that the root's recorded held-out split applies to them (:func:`split_of`; kept
    relative to ``path``'s folder, so that a data root moved whole still finds itself)."""
    meta = {_FORMAT: "1", _SKIPPED: str(skipped), _FINGERPRINT: fingerprint,
            **({_SPLIT_OF: os.path.relpath(split_of, path.parent)} if split_of is not None else {})}
    rows = 0
    with _temporary(path) as tmp:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema.with_metadata(meta)) as writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
        os.replace(tmp, path)
    return rows


@contextmanager
def _temporary(path: Path, tag: str = "") -> Iterator[Path]:
    """A temporary file name beside ``path`` (the name :mod:`storage.parquet` gives unfinished
    files, which a writer's lock removes after a crash), removed on exit unless it was renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{tag}.{uuid.uuid4().hex}.tmp")
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def _metadata(path: Path) -> dict[bytes, bytes]:
    with pa.OSFile(str(path)) as fh:
        return pa.ipc.open_file(fh).schema.metadata or {}


def _check_format(path: Path) -> None:
    """A :class:`CorpusError` unless ``path`` is an examples file this module wrote."""
    try:
        meta = _metadata(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorpusError(f"{path}: cannot be read as an Arrow examples file ({exc}); pass a pairs file "
                          "(.jsonl/.parquet/.csv) or a MOSAIC data root") from exc
    if _FORMAT not in meta:
        raise CorpusError(f"{path}: an Arrow file, but not MOSAIC training examples (mined hard negatives); pass the "
                          "pairs as .jsonl/.parquet/.csv or a MOSAIC data root")


# -- converting a pairs file ------------------------------------------------------------------

def _convert(path: Path, query_col: str, doc_col: str, out: Path, fingerprint: str) -> int:
    """Write the examples file ``out`` from the pairs file ``path`` in two streamed passes; its rows."""
    with _temporary(out, "-raw") as raw:
        kept, skipped, negatives = _write_raw(path, query_col, doc_col, raw)
        batches = _with_references(raw, kept) if negatives else (
            pa.RecordBatch.from_arrays([b.column(0), b.column(1), _empty_lists(b.num_rows)], schema=SCHEMA)
            for b in read_batches(raw))
        return write_examples(out, batches, skipped, fingerprint)


def _write_raw(path: Path, query_col: str, doc_col: str, raw: Path) -> tuple[int, int, int]:
    """The first pass: the rows of ``path`` with a usable query and document, and their usable
    negative texts (non-text negatives left out), to ``raw``; (rows kept, rows skipped, negatives)."""
    names = (query_col, doc_col, *NEGATIVE_COLUMNS)
    bad: dict[str, int] = {}
    present: set[str] = set()
    kept = read = negatives = 0
    with pa.OSFile(str(raw), "wb") as sink, pa.ipc.new_file(sink, _RAW) as writer:
        for rows in stream_rows(path, names, bad, present, BATCH_ROWS):
            usable = [(q, d, [n for v in negs for n in (v if isinstance(v, list) else [v]) if _usable(n)])
                      for q, d, *negs in rows if _usable(q) and _usable(d)]
            read, kept = read + len(rows), kept + len(usable)
            negatives += sum(len(r[2]) for r in usable)
            if usable:
                writer.write_batch(pa.RecordBatch.from_arrays([pa.array(c, t) for c, t in zip(
                    zip(*usable, strict=True), _RAW.types, strict=True)], schema=_RAW))
    missing = [c for c in (query_col, doc_col) if c not in present]
    if missing:
        raise CorpusError(f"{path}: no column(s) {missing}; it has {sorted(present)}. Name the text columns "
                          "with --query-column/--document-column.")
    skipped = sum(bad.values()) + read - kept
    if skipped:
        log.warning("%s: skipped %d rows without a usable %s/%s", path, skipped, query_col, doc_col)
    return kept, skipped, negatives


def _hashes(texts: Iterable[str]) -> np.ndarray:
    return np.fromiter((int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "big") for t in texts),
                       dtype=np.uint64)


def _empty_lists(n: int) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.int64()))


def _with_references(raw: Path, pairs: int) -> Iterator[pa.RecordBatch]:
    """The second pass: the rows of ``raw`` with each negative text replaced by the row of the
    first pair whose document it is; a text that is no pair's document becomes a row of its own
    after the pairs (once, however often it occurs). Memory: a hash and a row number per pair,
    and one per distinct extra text."""
    documents = np.concatenate([_hashes(b.column("document").to_pylist()) for b in read_batches(raw)])
    order = np.argsort(documents, kind="stable")  # equal hashes: the first pair first
    ranked = documents[order]
    extra: dict[int, int] = {}
    with _temporary(raw, "-extra") as extra_path:
        with pa.OSFile(str(extra_path), "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as writer:
            for batch in read_batches(raw):
                texts = pc.list_flatten(batch.column("negatives"))
                hashes = _hashes(texts.to_pylist())
                at = np.minimum(np.searchsorted(ranked, hashes), max(len(ranked) - 1, 0))
                refs = np.where(ranked[at] == hashes, order[at], -1) if len(ranked) else np.full(len(hashes), -1)
                new: list[str] = []
                for i in np.flatnonzero(refs < 0):
                    h = int(hashes[i])
                    if h not in extra:
                        extra[h] = pairs + len(extra)
                        new.append(texts[int(i)].as_py())
                    refs[i] = extra[h]
                if new:
                    writer.write_batch(pa.RecordBatch.from_arrays(
                        [pa.nulls(len(new), pa.large_string()), pa.array(new, pa.large_string()),
                         _empty_lists(len(new))], schema=SCHEMA))
                offsets = np.concatenate([[0], np.cumsum(pc.list_value_length(batch.column("negatives")))])
                yield pa.RecordBatch.from_arrays(
                    [batch.column(0), batch.column(1),
                     pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(refs, pa.int64()))],
                    schema=SCHEMA)
        yield from read_batches(extra_path)
