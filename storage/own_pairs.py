"""A user's own (query, document) pairs, read in batches from whatever they keep them in.

A source is a file, a folder or a glob of JSONL/JSON, Parquet or CSV/TSV files (compressed or
not), a Hugging Face dataset folder written by ``save_to_disk`` (its Arrow files), or a dataset
on the Hugging Face hub (``hf://datasets/OWNER/NAME[@REVISION][/GLOB]``, or ``OWNER/NAME`` where
no such local path exists): its data files are fetched into the hub's own cache, and taken from
that cache when the hub cannot be reached. Every
reader streams record batches — a Parquet row group, a CSV block, a bounded number of JSONL
lines — so a file of ten million rows is never held whole. What is wrong with a source is a
:class:`~storage.pairs_io.CorpusError` that names the file and what to do, raised by
:func:`check_own_pairs` before any work starts.
"""

from __future__ import annotations

import functools
import glob as globlib
import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from storage.pairs_io import CorpusError, _json_rows, open_binary

SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".tsv")
TEXT_SUFFIXES = (".txt", ".md")
"""Plain-text files, one document each: read only where a caller asks for them (documents)."""
COMPRESSED = (".gz", ".bz2", ".zst", ".lz4")
BATCH_ROWS = 10_000
HUB_PREFIX = "hf://datasets/"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w.-]+)?$")


def _kind(path: Path, text: bool = False) -> str | None:
    """``jsonl``, ``parquet``, ``csv``, ``tsv`` or ``arrow`` (a dataset's Arrow file), or ``text``
    (.txt, .md) when ``text``; None: not a file to read."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSED:
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if last == ".arrow":
        return "arrow"
    if last in SUFFIXES:
        return {".json": "jsonl"}.get(last, last[1:])
    return "text" if text and last in TEXT_SUFFIXES else None


def _listing(text: bool) -> str:
    return f"{'.txt, .md, ' if text else ''}.jsonl, .json, .parquet, .csv, .tsv"


def hub_dataset(source: str, what: str = "pairs", text: bool = False) -> tuple[str, str | None, str | None] | None:
    """(repository, revision, glob inside it) when ``source`` names a hub dataset: any
    ``hf://datasets/…``, or a bare ``OWNER/NAME[@REVISION]`` that is not a pairs file's name (nor,
    with ``text``, a .txt/.md file's). ``what`` names what the files hold in messages (``pairs``,
    ``documents``); the path is the source's (``source.path``)."""
    if source.startswith(HUB_PREFIX):
        parts = source.removeprefix(HUB_PREFIX).split("/", 2)
        if len(parts) < 2 or not all(parts[:2]):
            raise CorpusError(f"source.path {source!r}: a hub dataset is hf://datasets/OWNER/NAME[@REVISION][/GLOB]")
        name, _, revision = parts[1].partition("@")
        return f"{parts[0]}/{name}", revision or None, parts[2] if len(parts) == 3 else None
    if _HUB_ID.match(source) and _kind(Path(source), text) is None:
        repo, _, revision = source.partition("@")
        return repo, revision or None, None
    return None


def locate(source: str, base: Path, text: bool = False) -> str:
    """``source`` as the config should keep it: an absolute path (relative ones taken from
    ``base``), or unchanged when it names a hub dataset and no such local path exists (``text``:
    as for documents, whose .txt/.md files are no dataset's name)."""
    path = base / Path(source).expanduser()
    return source if not path.exists() and hub_dataset(source, text=text) is not None else str(path.resolve())


def _hub_files(source: str, hub: tuple[str, str | None, str | None], what: str, text: bool) -> list[Path]:
    """The pairs (or, with ``text``, documents) files of a hub dataset, from the hub's cache
    (downloaded there first when the hub is reachable)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    repo, revision, pattern = hub
    suffixes = (*SUFFIXES, *(TEXT_SUFFIXES if text else ()))
    patterns = [pattern] if pattern else [f"*{s}{c}" for s in suffixes for c in ("", *COMPRESSED)] + ["*.arrow"]
    try:
        folder = Path(snapshot_download(repo, repo_type="dataset", revision=revision, allow_patterns=patterns))
    except LocalEntryNotFoundError as exc:
        raise CorpusError(f"source.path {source!r}: no such local path, and the Hugging Face hub could not be reached "
                          "with no copy of that dataset in its cache; run once where the hub is reachable, or give "
                          "a local file") from exc
    except (HfHubHTTPError, ValueError) as exc:
        raise CorpusError(f"source.path {source!r}: no such local path, and the hub refused the dataset "
                          f"{repo!r}: {str(exc).splitlines()[0]}") from exc
    files = sorted(p for p in folder.rglob("*") if p.is_file() and _kind(p, text) and not p.name.startswith("."))
    if pattern:
        files = [p for p in files if p.relative_to(folder).match(pattern)]
    elif text:  # every dataset repository has a card: it is no document
        files = [p for p in files if p.relative_to(folder).as_posix().lower() != "readme.md"]
    if not files:
        raise CorpusError(f"source.path {source!r}: the hub dataset {repo!r} holds no {what} file ({_listing(text)}"
                          "); for a dataset built by a script, try its Parquet conversion "
                          f"(hf://datasets/{repo}@refs%2Fconvert%2Fparquet)")
    return files


def source_files(source: str, base: Path | None = None, *, what: str = "pairs", text: bool = False) -> list[Path]:
    """The files of ``source`` (a file, folder, glob, ``save_to_disk`` folder or hub dataset;
    relative to ``base`` when given), sorted; a CorpusError when there are none. With ``text``,
    .txt and .md files count too (documents); ``what`` names what the files hold in messages."""
    path = Path(source).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    hub = None if path.exists() else hub_dataset(source, what, text)
    if hub is not None:
        files = _hub_files(source, hub, what, text)
    elif path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and _kind(p, text) and not p.name.startswith("."))
        if (path / "dataset_info.json").is_file() or (path / "state.json").is_file():  # save_to_disk
            files = [p for p in files if _kind(p) == "arrow"]
    elif globlib.has_magic(str(path)):
        files = sorted(Path(p) for p in globlib.glob(str(path), recursive=True) if _kind(Path(p), text))
    else:
        where = f" (paths are relative to {base})" if base is not None and not Path(source).is_absolute() else ""
        raise CorpusError(f"source.path {source!r}: no such file, folder or glob{where}")
    if not files:
        raise CorpusError(f"source.path {source!r}: holds no {what} file ({_listing(text)}, "
                          "optionally compressed, or a Hugging Face save_to_disk folder)")
    # Absolute, not resolved: a hub cache's files are links to blobs whose names have no suffix.
    return [Path(os.path.abspath(f)) for f in files]


def content_hash(files: list[Path]) -> str:
    """A digest of the files' names and bytes: what caching compares. Each file is read once per
    process while it stays as it is (the cache key and the import both ask)."""
    h = hashlib.sha256()
    for path in files:
        st = path.stat()
        h.update(path.name.encode() + b"\0" + _file_digest(str(path), st.st_size, st.st_mtime_ns, st.st_ino))
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, size: int, mtime_ns: int, inode: int) -> bytes:
    """The SHA-256 of a file's bytes, read in blocks; keyed on its stat so a change reads it again."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.digest()


def _batches(path: Path, columns: tuple[str, ...], bad: dict[str, int]) -> Iterator[pa.RecordBatch | list[tuple]]:
    kind = _kind(path)
    try:
        if kind == "parquet":
            yield from pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=BATCH_ROWS, columns=list(columns))
        elif kind in ("csv", "tsv"):
            opts = pacsv.ParseOptions(delimiter="\t" if kind == "tsv" else ",", newlines_in_values=True)
            conv = pacsv.ConvertOptions(include_columns=list(columns), column_types={c: pa.string() for c in columns})
            with pacsv.open_csv(pa.input_stream(str(path), compression="detect"), parse_options=opts,
                                convert_options=conv) as reader:
                yield from reader
        elif kind == "arrow":
            with pa.memory_map(str(path)) as source:
                try:
                    reader = pa.ipc.open_stream(source)
                except pa.ArrowInvalid:
                    reader = pa.ipc.open_file(source)
                    yield from (reader.get_batch(i).select(list(columns)) for i in range(reader.num_record_batches))
                    return
                yield from (b.select(list(columns)) for b in reader)
        else:
            yield from _json_batches(path, columns, bad)
    except (pa.ArrowInvalid, pa.ArrowKeyError, KeyError, OSError) as exc:
        raise CorpusError(f"{path}: cannot be read as {kind}: {exc}") from exc


def _json_array(path: Path) -> list[dict] | None:
    """The records of a JSON array file (read whole: only small files are kept so), or ``None`` for
    JSON lines."""
    with open_binary(path) as fh:
        start = fh.peek(64)[:64].lstrip()
        return json.loads(fh.read().decode("utf-8")) if start.startswith(b"[") else None


def _json_batches(path: Path, columns: tuple[str, ...], bad: dict[str, int]) -> Iterator[list[tuple]]:
    records = _json_array(path)
    if records is None:
        yield from _json_rows(path, columns, bad, set(), BATCH_ROWS)
        return
    if unusable := sum(not isinstance(r, dict) for r in records):
        bad["invalid_json"] = bad.get("invalid_json", 0) + unusable
    yield [tuple(r.get(c) for c in columns) for r in records if isinstance(r, dict)]


def iter_pairs(files: list[Path], query_column: str, document_column: str,
               bad: dict[str, int]) -> Iterator[list[tuple[object, object]]]:
    """Batches of (query, document) cells of every file in order; rows a reader could not parse
    are counted in ``bad`` (``invalid_json``, ``too_long``, ``not_utf8``)."""
    for path in files:
        yield from file_batches(path, (query_column, document_column), bad)


def file_batches(path: Path, columns: tuple[str, ...], bad: dict[str, int]) -> Iterator[list[tuple]]:
    """Batches of rows (one cell per column, each column one the file has) of one file of a source,
    streamed; rows a reader could not parse are counted in ``bad``. A JSON record that lacks a
    column has ``None`` there."""
    for batch in _batches(path, columns, bad):
        if isinstance(batch, list):
            yield batch
        else:
            yield list(zip(*(batch.column(c).to_pylist() for c in columns), strict=True))


def file_columns(path: Path) -> set[str]:
    """The columns of one file of a source, read cheaply (a schema, a CSV header, the keys of the
    first 1,000 JSON records); a :class:`CorpusError` naming the file when it cannot be read."""
    try:
        return _columns(path)
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorpusError(f"{path}: cannot be read as {_kind(path)}: {str(exc).splitlines()[0]}") from exc


def _columns(path: Path) -> set[str]:
    kind = _kind(path)
    if kind == "parquet":
        return set(pq.read_schema(path).names)
    if kind in ("csv", "tsv"):
        opts = pacsv.ParseOptions(delimiter="\t" if kind == "tsv" else ",", newlines_in_values=True)
        with pacsv.open_csv(pa.input_stream(str(path), compression="detect"), parse_options=opts) as reader:
            return set(reader.schema.names)
    if kind == "arrow":
        with pa.memory_map(str(path)) as source:
            try:
                return set(pa.ipc.open_stream(source).schema.names)
            except pa.ArrowInvalid:
                return set(pa.ipc.open_file(source).schema.names)
    records, keys = _json_array(path), set()
    if records is None:
        next(_json_rows(path, (), {}, keys, 1000), None)  # the keys of the first 1,000 records
        return keys
    return keys.union(*(r for r in records[:1000] if isinstance(r, dict)))


def check_own_pairs(source: str, query_column: str, document_column: str, base: Path | None = None) -> list[Path]:
    """The files of ``source`` after checking that each can be read and has both columns; a
    :class:`CorpusError` naming the file, the missing column and the columns it has otherwise."""
    files = source_files(source, base)
    for path in files:
        require_columns(path, (query_column, document_column), "pairs",
                        "set source.query_column / source.document_column (--query-column / --document-column)")
    return files


def require_columns(path: Path, columns: tuple[str, ...], what: str, hint: str) -> set[str]:
    """The columns of ``path`` (:func:`file_columns`), which must include ``columns``: else a
    :class:`CorpusError` naming the file, the missing columns and those it has, then ``hint``
    (which setting names them). ``what`` names what the rows hold (``pairs``, ``documents``)."""
    present = file_columns(path)
    if not present:
        raise CorpusError(f"{path} {'is empty' if path.stat().st_size == 0 else 'has no row that reads'}: there are "
                          f"no {what} in it. Pass {what} with {' and '.join(repr(c) for c in columns)} in each row")
    missing = [c for c in columns if c not in present]
    if missing:
        names = " or ".join(repr(c) for c in missing)
        raise CorpusError(f"{path}: no column {names}; it has {sorted(present)}: {hint}")
    return present
