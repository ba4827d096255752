"""Reading text corpora and pair files: JSONL, Parquet, CSV, or a data root's catalog."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from storage.catalog import Catalog
from storage.layout import DataLayout
from storage.manifest import read_manifest


class CorpusError(ValueError):
    """A corpus cannot be read as given; the message says which file/column and what to do."""


def read_table(path: Path) -> pa.Table:
    """A JSONL (``.jsonl``/``.json``), Parquet or CSV file as a pyarrow table."""
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    try:
        if suffix in (".jsonl", ".json", ".jsonl.gz", ".json.gz"):
            return pajson.read_json(path)
        if suffix == ".parquet":
            return pq.read_table(path)
        if suffix in (".csv", ".csv.gz", ".tsv"):
            opts = pacsv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
            return pacsv.read_csv(path, parse_options=opts)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorpusError(f"{path}: cannot be read as {suffix}: {exc}") from exc
    raise CorpusError(f"{path}: unknown format {suffix!r}; use .jsonl, .parquet or .csv")


def corpus_texts(source: str, columns: tuple[str, ...] = ("query", "document")) -> list[str]:
    """Non-empty texts of ``columns`` from a pairs file, or from a data root's ``latest_pairs``."""
    path = Path(source).expanduser()
    if (path / "catalog.duckdb").exists() or (path / "manifests").is_dir():
        with Catalog(DataLayout(path)) as cat:
            cat.refresh()
            rows = cat.rows("SELECT query, document FROM latest_pairs ORDER BY file_seq, pmid")
        return [t for row in rows for t in row if t]
    if not path.is_file():
        raise CorpusError(f"corpus {source!r} is neither a pairs file nor a MOSAIC data root")
    table = read_table(path)
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise CorpusError(
            f"{path}: no column(s) {missing}; it has {table.column_names}. Name the text columns "
            "with --columns."
        )
    texts = []
    for row in zip(*(table.column(c).to_pylist() for c in columns), strict=True):
        texts += [t for t in row if isinstance(t, str) and t.strip()]
    return texts


def corpus_fingerprint(source: str) -> str:
    """Content digest of a corpus: a file's bytes, or a data root's ingest manifests
    (source checksums, config and code versions), which determine its ``latest_pairs``."""
    path = Path(source).expanduser()
    h = hashlib.sha256()
    if path.is_file():
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
        return h.hexdigest()[:16]
    layout = DataLayout(path)
    for manifest_path in sorted(layout.manifest_dir("ingest").glob("*.json")):
        m = read_manifest(layout, "ingest", manifest_path.stem)
        h.update(f"{m.partition}:{m.source_md5}:{m.config_hash}:{m.code_version}:{m.status}\n".encode())
    return h.hexdigest()[:16]
