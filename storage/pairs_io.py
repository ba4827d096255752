"""Reading text corpora and pair files: JSONL, Parquet, CSV, or a data root's catalog."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from storage.catalog import Catalog
from storage.layout import DataLayout, partition_name
from storage.manifest import read_manifest


log = logging.getLogger(__name__)


class CorpusError(ValueError):
    """A corpus cannot be read as given; the message says which file/column and what to do."""


def read_table(path: Path) -> pa.Table:
    """A Parquet or CSV/TSV file as a pyarrow table (JSONL goes through :func:`file_rows`)."""
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    try:
        if suffix == ".parquet":
            return pq.read_table(path)
        if suffix in (".csv", ".csv.gz", ".tsv"):
            opts = pacsv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
            return pacsv.read_csv(path, parse_options=opts)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorpusError(f"{path}: cannot be read as {suffix}: {exc}") from exc
    raise CorpusError(f"{path}: unknown format {suffix!r}; use .jsonl, .parquet or .csv")


MAX_LINE_BYTES = 1 << 20
"""A JSONL line longer than this (1 MiB) is skipped as ``too_long`` without being read whole: no
pair or corpus text is that long, and one such line (a stray dump, a file that is not JSONL)
would otherwise cost memory many times its size."""

_SHOW_LINES = 5  # line numbers a warning names


def open_binary(path: Path) -> BinaryIO:
    """``path`` opened for reading bytes, decompressed on the fly when its name ends in ``.gz``,
    ``.bz2``, ``.zst`` or ``.lz4`` (buffered, so ``readline`` works on either)."""
    return io.BufferedReader(pa.input_stream(str(path), compression="detect"))


def _skip_to_newline(fh: BinaryIO, chunk: int = 1 << 16) -> None:
    while block := fh.readline(chunk):
        if block.endswith(b"\n"):
            return


def _jsonl_lines(path: Path, bad: dict[str, int], max_lines: int | None = None, warn: bool = True) -> Iterator[str]:
    """The non-blank lines of a JSONL file as text. The file is read in binary with a bounded
    ``readline``, so a line longer than :data:`MAX_LINE_BYTES` is never held whole: it is skipped
    and counted in ``bad["too_long"]``; a line that is not valid UTF-8 is counted in
    ``bad["not_utf8"]``. A compressed file is decompressed as it is read. Both are logged once,
    naming the file and the first line numbers."""
    lines: dict[str, list[int]] = {}
    with open_binary(path) as fh:
        lineno = 0
        while max_lines is None or lineno < max_lines:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            lineno += 1
            reason = None
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                _skip_to_newline(fh)
                reason = "too_long"
            else:
                try:
                    text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
                except UnicodeDecodeError:
                    reason = "not_utf8"
            if reason:
                bad[reason] = bad.get(reason, 0) + 1
                first = lines.setdefault(reason, [])
                if len(first) < _SHOW_LINES:
                    first.append(lineno)
            elif text.strip():
                yield text
    if warn:
        what = {"too_long": f"longer than {MAX_LINE_BYTES:,} bytes", "not_utf8": "not valid UTF-8"}
        for reason, first in lines.items():
            more = ", …" if bad[reason] > len(first) else ""
            log.warning("%s: skipped %d line(s) %s (%s: line %s%s)", path, bad[reason], what[reason], reason,
                        ", ".join(map(str, first)), more)


def file_rows_counted(path: Path, columns: tuple[str, ...],
                      optional: tuple[str, ...] = ()) -> tuple[list[tuple], dict[str, int]]:
    """(one tuple of ``columns`` + ``optional`` values per row, lines that could not be read, by
    reason) of a pairs file. JSONL is read line by line, so one broken line costs that line only:
    ``invalid_json`` (not a JSON object), ``too_long`` (over :data:`MAX_LINE_BYTES`), ``not_utf8``;
    values a row lacks are ``None``. A required column absent from the whole file is a
    :class:`CorpusError`."""
    names = (*columns, *optional)
    bad: dict[str, int] = {}
    if path.suffix in (".jsonl", ".json"):
        records = []
        for line in _jsonl_lines(path, bad):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                rec = None
            if isinstance(rec, dict):
                records.append(rec)
            else:
                bad["invalid_json"] = bad.get("invalid_json", 0) + 1
        present = set().union(*(r.keys() for r in records))
        rows = [tuple(r.get(c) for c in names) for r in records]
    else:
        table = read_table(path)
        present = set(table.column_names)
        rows = list(zip(*(table.column(c).to_pylist() if c in present else [None] * table.num_rows
                          for c in names), strict=True))
    missing = [c for c in columns if c not in present]
    if missing:
        raise CorpusError(f"{path}: no column(s) {missing}; it has {sorted(present)}. Name the text columns "
                          "with --columns (mosaic vocab) or --query-column/--document-column (mosaic filter).")
    return rows, bad


def file_rows(path: Path, columns: tuple[str, ...], optional: tuple[str, ...] = ()) -> tuple[list[tuple], int]:
    """:func:`file_rows_counted` with the unreadable lines as one count."""
    rows, bad = file_rows_counted(path, columns, optional)
    return rows, sum(bad.values())


def _is_data_root(path: Path) -> bool:
    return (path / "catalog.duckdb").exists() or (path / "manifests").is_dir()


def _header(path: Path, sample_lines: int = 1000) -> set[str]:
    """The columns of a pairs file, read cheaply (a Parquet schema, a CSV header, the keys of the
    first JSON lines)."""
    if path.suffix in (".jsonl", ".json"):
        keys: set[str] = set()
        for line in _jsonl_lines(path, {}, max_lines=sample_lines, warn=False):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            keys |= set(rec) if isinstance(rec, dict) else set()
        return keys
    if path.suffix == ".parquet":
        try:
            return set(pq.read_schema(path).names)
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorpusError(f"{path}: cannot be read as Parquet: {exc}") from exc
    return set(read_table(path).column_names)


def check_pairs_source(source: str, columns: tuple[str, ...], what: str = "pairs source") -> Path:
    """``source`` as a path, after checking it is a MOSAIC data root or a pairs file that has
    ``columns``; a :class:`CorpusError` saying what is wrong and what to pass otherwise."""
    path = Path(source).expanduser()
    if not path.exists():
        raise CorpusError(f"{what} {source!r} does not exist: pass a pairs file (.jsonl/.parquet/.csv) or a MOSAIC "
                          "data root (a folder `mosaic ingest` wrote)")
    if path.suffix == ".arrow":  # an examples file (mined hard negatives): its columns are query and document
        return path
    if path.is_dir():
        if not _is_data_root(path):
            raise CorpusError(f"{what} {source!r} is a folder but not a MOSAIC data root (no catalog.duckdb or "
                              "manifests/): run `mosaic ingest` into it first, or pass a pairs file")
        return path
    present = _header(path)
    if not present:
        what_is = "is empty" if path.stat().st_size == 0 else "has no row that reads (no JSON object, no header)"
        raise CorpusError(f"{path} {what_is}: there are no pairs to read. Pass a file with {list(columns)} in each "
                          "row (.jsonl: one JSON object per line)")
    missing = [c for c in columns if c not in present]
    if missing:
        raise CorpusError(f"{path}: no column(s) {missing}; it has {sorted(present)}. Name the text columns "
                          "with --columns (mosaic vocab) or --query-column/--document-column (mosaic filter, train, "
                          "eval).")
    return path


def _root_pairs(path: Path) -> list[tuple[str, str]]:
    """A data root's (query, document) rows: ``training_pairs`` once the filter has run, else
    ``latest_pairs``, in a stable order."""
    with Catalog(DataLayout(path)) as cat:
        cat.refresh()
        filtered = (path / "manifests" / "filter").is_dir()
        return cat.rows("SELECT query, document FROM training_pairs ORDER BY source_file, pair_id" if filtered
                        else "SELECT query, document FROM latest_pairs ORDER BY file_seq, pmid")


def _usable(text: object) -> bool:
    return unusable_reason("text", text) is None


NEGATIVE_COLUMNS = ("negatives", "negative", *(f"negative_{i}" for i in range(2, 33)))
"""Hard-negative columns of a pairs file: a list column ``negatives``, or ``negative``, ``negative_2``, …"""


def read_pairs(source: str, query_col: str = "query", doc_col: str = "document") -> tuple[list[tuple[str, str]], int]:
    """(usable (query, document) pairs, rows skipped as unusable) of a data root or pairs file;
    skipped rows are logged with their count, never silently lost. For evaluation and export: a
    training stage streams its pairs from an examples file instead (:mod:`storage.examples`)."""
    path = Path(source).expanduser()
    if _is_data_root(path):
        return _root_pairs(path), 0
    if not path.is_file():
        raise CorpusError(f"pairs source {source!r} is neither a pairs file nor a MOSAIC data root")
    rows, invalid = file_rows(path, (query_col, doc_col))
    pairs = [(q, d) for q, d in rows if _usable(q) and _usable(d)]
    skipped = invalid + len(rows) - len(pairs)
    if skipped:
        log.warning("%s: skipped %d rows without a usable %s/%s", path, skipped, query_col, doc_col)
    return pairs, skipped


STREAM_ROWS = 2048
"""Rows per batch a pairs file is streamed in."""


def _pair_batch(queries, documents) -> pa.RecordBatch:
    return pa.record_batch({"query": pa.array(queries, pa.string()), "document": pa.array(documents, pa.string())})


def pair_batches(source: str, query_col: str = "query", doc_col: str = "document",
                 skipped: dict[str, int] | None = None) -> Iterator[pa.RecordBatch]:
    """:func:`read_pairs`'s usable pairs in its order, streamed as record batches with ``query``
    and ``document`` columns: memory holds one batch. Unusable rows and unreadable lines are
    counted into ``skipped`` (by reason) rather than logged, so that a caller passing over the
    source twice reports them once."""
    skipped = {} if skipped is None else skipped
    path = Path(source).expanduser()
    if _is_data_root(path):
        for queries, documents in _root_texts(path):
            yield _pair_batch(queries, documents)
        return
    if not path.is_file():
        raise CorpusError(f"pairs source {source!r} is neither a pairs file nor a MOSAIC data root")
    check_pairs_source(str(path), (query_col, doc_col))
    for rows in stream_rows(path, (query_col, doc_col), skipped, set()):
        usable = [(q, d) for q, d in rows if _usable(q) and _usable(d)]
        if len(usable) < len(rows):
            skipped["unusable"] = skipped.get("unusable", 0) + len(rows) - len(usable)
        if usable:
            queries, documents = zip(*usable, strict=True)
            yield _pair_batch(queries, documents)


def stream_rows(path: Path, names: tuple[str, ...], bad: dict[str, int], present: set[str],
                batch_rows: int | None = None) -> Iterator[list[tuple]]:
    """Batches of (one value per ``names``; ``None`` where a row lacks it) rows of a pairs file,
    streamed, ``batch_rows`` (default :data:`STREAM_ROWS`) at a time (a JSONL file's batches hold
    exactly that many but the last).
    JSONL is read line by line: a line that is no JSON object is counted in ``bad["invalid_json"]``
    (too long / not UTF-8: :func:`_jsonl_lines`). ``present`` collects the file's column names."""
    batch_rows = batch_rows or STREAM_ROWS
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    if suffix in (".jsonl", ".json"):
        yield from _json_rows(path, names, bad, present, batch_rows)
        return
    try:
        if suffix == ".parquet":
            parquet = pq.ParquetFile(path, pre_buffer=False)  # pre-buffering kept ~1 GB of a 1M-pair file
            present.update(parquet.schema_arrow.names)
            batches = parquet.iter_batches(batch_rows, columns=[c for c in names if c in present])
        elif suffix in (".csv", ".csv.gz", ".tsv"):
            delimiter = "\t" if suffix == ".tsv" else ","
            batches = pacsv.open_csv(path, parse_options=pacsv.ParseOptions(delimiter=delimiter))
            present.update(batches.schema.names)
        else:
            raise CorpusError(f"{path}: unknown format {suffix!r}; use .jsonl, .parquet or .csv")
        for batch in batches:
            yield list(zip(*(batch.column(c).to_pylist() if c in present else [None] * batch.num_rows
                             for c in names), strict=True))
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorpusError(f"{path}: cannot be read as {suffix}: {exc}") from exc


def _json_rows(path: Path, names: tuple[str, ...], bad: dict[str, int], present: set[str],
               batch_rows: int) -> Iterator[list[tuple]]:
    rows: list[tuple] = []
    for line in _jsonl_lines(path, bad):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            rec = None
        if not isinstance(rec, dict):
            bad["invalid_json"] = bad.get("invalid_json", 0) + 1
            continue
        present.update(rec)
        rows.append(tuple(rec.get(c) for c in names))
        if len(rows) == batch_rows:
            yield rows
            rows = []
    if rows:
        yield rows


def _root_texts(path: Path, batch_rows: int = 8192) -> Iterator[list]:
    """Batches of (queries, documents) of a data root, streamed from its catalog in
    :func:`_root_pairs`'s order."""
    with Catalog(DataLayout(path)) as cat:
        cat.refresh()
        filtered = (path / "manifests" / "filter").is_dir()
        reader = cat.con.sql(
            "SELECT query, document FROM training_pairs ORDER BY source_file, pair_id" if filtered
            else "SELECT query, document FROM latest_pairs ORDER BY file_seq, pmid").to_arrow_reader(batch_rows)
        for batch in reader:
            yield [batch.column(0).to_pylist(), batch.column(1).to_pylist()]


def iter_corpus_texts(source: str, columns: tuple[str, ...] = ("query", "document")) -> Iterator[str]:
    """Non-empty texts of ``columns`` from a pairs file, or from a data root (its
    ``training_pairs`` once the filter has run, else its ``latest_pairs``), row by row, streamed:
    memory does not grow with the corpus. Lines that cannot be read are skipped and logged."""
    path = Path(source).expanduser()
    if _is_data_root(path):
        for batch in _root_texts(path):
            yield from (t for row in zip(*batch, strict=True) for t in row if _usable(t))
        return
    if not path.is_file():
        raise CorpusError(f"corpus {source!r} is neither a pairs file nor a MOSAIC data root")
    check_pairs_source(str(path), columns, "corpus")
    bad: dict[str, int] = {}
    for rows in stream_rows(path, columns, bad, set()):
        yield from (t for row in rows for t in row if _usable(t))
    if bad.get("invalid_json"):
        log.warning("%s: skipped %d lines that are not JSON objects", path, bad["invalid_json"])


def corpus_fingerprint(source: str) -> str:
    """Content digest of a corpus: a file's bytes, or a data root's ingest and filter manifests
    (source checksums, config and code versions, counts), which determine its pairs. A file is
    read once per process while it is unchanged (same path, size, times and inode): every cache
    key and output check of a run fingerprints the same pairs file, a large one many times."""
    path = Path(source).expanduser()
    if path.is_file():
        st = path.stat()
        return _file_digest(str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    h = hashlib.sha256()
    layout = DataLayout(path)
    for stage in ("ingest", "filter"):
        for manifest_path in sorted(layout.manifest_dir(stage).glob("*.json")):
            m = read_manifest(layout, stage, manifest_path.stem)
            h.update(f"{stage}:{m.partition}:{m.source_md5}:{m.config_hash}:{m.code_version}:{m.status}:"
                     f"{m.kept}\n".encode())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, size: int, mtime_ns: int, ctime_ns: int, inode: int) -> str:
    """The digest of the file ``path``'s bytes; the other arguments key the cache: a file
    rewritten or replaced (an atomic write is a new inode) is read again."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class PairPartition:
    """One partition of candidate pairs: an ingested source file, or ``rows`` rows of a pairs file
    from row ``start`` on (rows as :func:`stream_rows` yields them)."""

    name: str
    source: str
    checksum: str
    rows: int
    start: int = 0


@dataclass
class PairRows:
    """The good rows of a partition, and how many rows were unusable, by reason."""

    pair_ids: list[str]
    queries: list[str]
    documents: list[str]
    bad: dict[str, int]


PARTITION_ROWS = 50 * STREAM_ROWS
"""Rows per partition of a pairs file (102,400): a partition's texts and embeddings are in memory
while it is encoded. A multiple of :data:`STREAM_ROWS`, so the lines of a JSONL file that cannot
be read are counted in the partition they lie in."""


def list_pair_partitions(source: str, query_col: str = "query", doc_col: str = "document") -> list[PairPartition]:
    """Partitions of a data root (one per ingested file, its *latest* pairs) or of a pairs file (one
    per :data:`PARTITION_ROWS` rows, counted in one streamed pass; a file of no more rows keeps
    the name and checksum it always had)."""
    path = Path(source).expanduser().resolve()
    if (path / "manifests" / "ingest").is_dir():
        with Catalog(DataLayout(path)) as cat:
            cat.refresh()
            rows = cat.rows(
                """
                SELECT source_file, count(*),
                       md5(string_agg(pmid::VARCHAR || chr(31) || query || chr(31) || document, chr(30)
                                      ORDER BY pmid))
                FROM latest_pairs GROUP BY source_file ORDER BY min(file_seq), source_file
                """
            )
        return [PairPartition(name, str(path), digest, n) for name, n, digest in rows]
    if not path.is_file():
        raise CorpusError(f"pairs source {source!r} is neither a pairs file nor a MOSAIC data root")
    check_pairs_source(str(path), (query_col, doc_col))  # fail here, before any encoding, on wrong column names
    n = sum(len(rows) for rows in stream_rows(path, (query_col,), {}, set()))
    digest = corpus_fingerprint(str(path)) + hashlib.sha256(f"{query_col}|{doc_col}".encode()).hexdigest()[:8]
    name = partition_name(path.name.split(".")[0])
    if n <= PARTITION_ROWS:
        return [PairPartition(name, str(path), digest, n)]
    return [PairPartition(f"{name}-{k:05d}", str(path), f"{digest}-{k}", min(PARTITION_ROWS, n - start), start)
            for k, start in enumerate(range(0, n, PARTITION_ROWS))]


def unusable_reason(column: str, value: object) -> str | None:
    """Why a cell cannot be used as text (``missing_<column>``: null or blank; ``non_text_<column>``:
    a number, list, …), or ``None`` when it can."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return f"missing_{column}"
    return None if isinstance(value, str) else f"non_text_{column}"


def read_pair_partition(part: PairPartition, query_col: str = "query", doc_col: str = "document") -> PairRows:
    """Rows of ``part``; rows without a usable query/document are counted per reason, not returned,
    and so are the lines of a JSONL file that cannot be read, in the partition they lie in."""
    path = Path(part.source)
    if path.is_dir():
        with Catalog(DataLayout(path), read_only=True) as cat:
            rows = cat.rows("SELECT pmid::VARCHAR, query, document FROM latest_pairs WHERE source_file = ? "
                            "ORDER BY pmid", [part.name])
        return PairRows([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], {})
    out = PairRows([], [], [], {"missing_query": 0, "missing_document": 0})
    bad: dict[str, int] = {}
    before, after, first, stop = {}, None, 0, part.start + part.rows
    for batch in stream_rows(path, (query_col, doc_col, "id"), bad, set()):
        if first >= stop:
            break
        if first + len(batch) <= part.start:
            first += len(batch)
            before = dict(bad)  # the unreadable lines up to here are earlier partitions'
            continue
        after = dict(bad)
        for i, (q, d, pid) in enumerate(batch[max(part.start - first, 0):stop - first], start=max(part.start, first)):
            reason = unusable_reason("query", q) or unusable_reason("document", d)
            if reason:
                out.bad[reason] = out.bad.get(reason, 0) + 1
            else:
                out.pair_ids.append(str(pid if pid is not None else i))
                out.queries.append(q)
                out.documents.append(d)
        first += len(batch)
    else:
        after = dict(bad)  # the file's end: its last unreadable lines are the last partition's
    out.bad = {"invalid_json": 0, **{k: v - before.get(k, 0) for k, v in (after or before).items()}, **out.bad}
    return out


def write_jsonl(path: Path, records: Iterable[dict]) -> int:
    """Write records as JSON Lines, streamed and atomically (a temporary file beside ``path``, then
    renamed); how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    count = 0
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return count
