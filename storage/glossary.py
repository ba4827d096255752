"""A run's glossary on disk: its file (local, or downloaded into the data root and verified), its
rows or its XML stream, and the files the run writes from it into the data root.

Layout under ``DATA_ROOT/glossary/`` (each file written atomically, under the root's lock):

* ``entries.jsonl``: one ``{term, definition, synonyms, examples}`` per kept entry, in file order;
* ``dictionary.jsonl``: ``{query: term, document: dictionary text}`` (the dictionary stage's texts);
* ``definition_pairs.jsonl``: ``{query, document}`` pairs whose document is a definition;
* ``glossary.json``: what they were made from (its ``identity``: the glossary file's digest, the
  settings' hash, the code version, the corpus) and the counts: entries kept, records dropped by
  reason, texts and pairs written.

A downloaded glossary lives in ``DATA_ROOT/raw/glossary/<name>``, verified against the
``<url>.md5`` sidecar when the server publishes one, and reused while it still matches it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

from storage.layout import DataLayout
from storage.own_pairs import content_hash, file_batches, file_columns, require_columns
from storage.pairs_io import CorpusError, open_binary, write_jsonl
from storage.sources import SourceError, SourceFile, TransientDownloadError, fetch, is_remote

ENTRIES, DICTIONARY, PAIRS, RECORD = "entries.jsonl", "dictionary.jsonl", "definition_pairs.jsonl", "glossary.json"


def glossary_dir(data_root: str | Path) -> Path:
    return DataLayout(data_root).root / "glossary"


def local_glossary(path: str, data_root: str | Path | None) -> Path:
    """The glossary file ``path`` on local disk: itself, or (an http(s) URL) its download under
    ``data_root`` (fetched once, verified against ``<url>.md5`` where published, reused while it
    matches; a download that broke off is a ``TransientDownloadError`` a retry can fix)."""
    if not is_remote(path):
        local = Path(path).expanduser()
        if not local.is_file():
            raise CorpusError(f"glossary.path {path!r}: no such file; give a JSONL, CSV or TSV glossary (term, "
                              "definition columns) or a MeSH descriptor file (descYYYY.xml)")
        return local
    if data_root is None:
        raise ValueError("a glossary URL is downloaded into a data root: give one")
    name = Path(urlparse(path).path).name
    try:
        return Path(fetch(SourceFile(name, path, "glossary"), DataLayout(data_root), sidecar="optional").path)
    except TransientDownloadError:
        raise
    except SourceError as exc:
        raise CorpusError(f"glossary.path {path!r}: {exc}") from exc


def starts_with_markup(path: Path) -> bool:
    """Whether the file, decompressed, starts with ``<`` (XML; NLM's ``desc2025.gz`` has no
    ``.xml`` in its name)."""
    try:
        with open_binary(path) as fh:
            return fh.read(4096).lstrip().startswith(b"<")
    except OSError as exc:
        raise CorpusError(f"{path}: cannot be read: {exc}") from exc


def table_rows(path: Path, required: tuple[str, str], optional: tuple[str, ...],
               bad: dict[str, int]) -> Iterator[dict]:
    """The rows of a glossary table (JSONL/JSON, CSV, TSV, Parquet), streamed, as dicts of the
    ``required`` columns (a :class:`CorpusError` naming the file when it lacks one) and those of
    ``optional`` it has; unreadable rows are counted in ``bad``."""
    require_columns(path, required, "glossary entries",
                    "set glossary.term_column / glossary.definition_column (or give MeSH XML: format: mesh)")
    present = file_columns(path)
    columns = (*required, *(c for c in optional if c in present))
    for batch in file_batches(path, columns, bad):
        yield from (dict(zip(columns, row, strict=True)) for row in batch)


def file_digest(path: Path) -> str:
    return content_hash([path])


def read_jsonl(path: str | Path) -> Iterator[dict]:
    """The rows of a JSON-lines file this module wrote, in order."""
    with open(path, encoding="utf-8") as fh:
        yield from (json.loads(line) for line in fh)


def written_glossary(data_root: str | Path, identity: dict) -> dict | None:
    """The record of the glossary files in the data root when they are whole and were made from
    ``identity``; None otherwise (they are written again)."""
    folder = glossary_dir(data_root)
    try:
        record = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None
    whole = all((folder / name).is_file() for name in (ENTRIES, DICTIONARY, PAIRS))
    return record if whole and record.get("identity") == identity else None


def write_record(data_root: str | Path, record: dict) -> dict:
    """``record`` with the paths of the glossary files, written last (the files are whole once it is)."""
    folder = glossary_dir(data_root)
    record = {**record, "entries_path": str(folder / ENTRIES), "dictionary_path": str(folder / DICTIONARY),
              "pairs_path": str(folder / PAIRS)}
    write_jsonl(folder / RECORD, [record])
    return record
