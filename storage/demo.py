"""Where the generated demo lives in a data root: its snapshot (``demo/snapshot``, laid out like
NCBI's pubmed/), its invented-term task (``demo/invented-terms``, a BEIR folder) and its glossary
(``demo/glossary.jsonl``: each invented word's definition); and the demo as a stream of updates
(:func:`write_stream`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from storage.benchmarks import write_beir
from storage.layout import DataLayout
from storage.parquet import write_atomic_bytes


GLOSSARY = "glossary.jsonl"
INTRODUCED = "introduced.json"
TASK = "invented-terms"


class Stream(Protocol):
    """What :func:`write_stream` writes: ``mosaic_core.data.demo.DemoStream``'s fields."""

    files: dict[str, bytes]
    corpus: list[dict]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    introduced: dict[str, int]

    @property
    def glossary(self) -> list[dict]: ...


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
    write_files(layout.root / "demo", {GLOSSARY: _jsonl(glossary)})
    return snapshot, task, layout.root / "demo" / GLOSSARY


def _jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(e) + "\n" for e in records).encode()


def write_stream(folder: Path, stream: Stream) -> dict[str, Path]:
    """The stream written under ``folder``: its snapshot (``baseline/``, ``updatefiles/``, with the
    ``.md5`` sidecars), the invented-term task over every word (``invented-terms/``, a BEIR
    folder), the glossary (``glossary.jsonl``) and the tick each word first appears at
    (``introduced.json``); each file atomically and only when its bytes differ. Returns those
    paths by name (snapshot, task, glossary, introduced)."""
    folder = Path(folder)
    write_files(folder, stream.files)
    write_beir(folder / TASK, stream.corpus, stream.queries, stream.qrels)
    write_files(folder, {GLOSSARY: _jsonl(stream.glossary),
                         INTRODUCED: (json.dumps(stream.introduced, indent=1) + "\n").encode()})
    return {"snapshot": folder, "task": folder / TASK, "glossary": folder / GLOSSARY,
            "introduced": folder / INTRODUCED}
