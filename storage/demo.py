"""Where the generated demo lives in a data root: its snapshot (``demo/snapshot``, laid out like
NCBI's pubmed/), its invented-term task (``demo/invented-terms``, a BEIR folder) and its glossary
(``demo/glossary.jsonl``: each invented word's definition)."""

from __future__ import annotations

import json
from pathlib import Path

from storage.benchmarks import write_beir
from storage.layout import DataLayout
from storage.parquet import write_atomic_bytes


GLOSSARY = "glossary.jsonl"


def write_files(root: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` (relative path → bytes) under ``root``, each atomically and only when its
    bytes differ: an unchanged file keeps its modification time, so a rebuild sees no change."""
    for name, data in files.items():
        path = root / name
        if not (path.is_file() and path.read_bytes() == data):
            write_atomic_bytes(path, data)


def write_demo(layout: DataLayout, files: dict[str, bytes], corpus: list[dict], queries: dict[str, str],
               qrels: dict[str, dict[str, int]], glossary: list[dict]) -> tuple[Path, Path, Path]:
    """(snapshot folder, task folder, glossary file) of the demo written into ``layout``'s root."""
    snapshot, task = layout.root / "demo" / "snapshot", layout.root / "demo" / "invented-terms"
    write_files(snapshot, files)
    write_beir(task, corpus, queries, qrels)
    write_files(layout.root / "demo", {GLOSSARY: "".join(json.dumps(e) + "\n" for e in glossary).encode()})
    return snapshot, task, layout.root / "demo" / GLOSSARY
