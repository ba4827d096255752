"""Evaluation data from files: BEIR retrieval folders and STS pair files.

Every reader returns plain records plus a content checksum (the eval cache key) and raises
:class:`BenchmarkError` naming the file and what to fix.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from storage.pairs_io import file_rows, write_jsonl


class BenchmarkError(ValueError):
    """Benchmark files are missing or malformed; the message says which and how to fix it."""


@dataclass
class RetrievalData:
    """``corpus``: [{id, title, text}]; ``queries``: {id: text}; ``qrels``: {query id: {doc id: grade}}."""

    name: str
    corpus: list[dict]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    checksum: str
    description: str = ""
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass
class STSData:
    name: str
    rows: list[dict]  # {sentence1, sentence2, score}
    min_score: float
    max_score: float
    checksum: str
    skipped: int = 0


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise BenchmarkError(f"{path} not found: a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise BenchmarkError(f"{path}:{n}: not JSON ({exc.msg}); fix or remove the line") from exc
    return out


def read_beir(folder: Path, split: str | None = None) -> RetrievalData:
    """A BEIR-format folder: ``corpus.jsonl`` ({_id, title, text}), ``queries.jsonl`` ({_id, text}),
    ``qrels/<split>.tsv`` (query-id, corpus-id, score; header optional). ``split`` defaults to
    ``test`` when present, else the only qrels file."""
    folder = Path(folder)
    qrel_files = sorted((folder / "qrels").glob("*.tsv"))
    if not qrel_files:
        raise BenchmarkError(f"{folder}/qrels/ has no <split>.tsv: a BEIR folder holds corpus.jsonl, queries.jsonl "
                             "and qrels/<split>.tsv")
    names = [p.stem for p in qrel_files]
    split = split or ("test" if "test" in names else names[0] if len(names) == 1 else None)
    if split not in names:
        raise BenchmarkError(f"{folder}: choose a qrels split from {names}")
    qrels_path = folder / "qrels" / f"{split}.tsv"
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path, newline="", encoding="utf-8") as fh:
        for n, row in enumerate(csv.reader(fh, delimiter="\t"), 1):
            if n == 1 and row and not row[-1].lstrip("-").isdigit():
                continue  # header
            if len(row) < 3:
                raise BenchmarkError(f"{qrels_path}:{n}: expected query-id, corpus-id, score")
            qrels.setdefault(row[0], {})[row[-2]] = int(row[-1])
    corpus = [{"id": str(r["_id"]), "title": r.get("title") or "", "text": r.get("text") or ""}
              for r in _jsonl(folder / "corpus.jsonl")]
    all_queries = {str(r["_id"]): r["text"] for r in _jsonl(folder / "queries.jsonl")}
    doc_ids = {d["id"] for d in corpus}
    skipped = {"queries_without_text": 0, "judgements_for_unknown_docs": 0}
    for qid in list(qrels):
        judged = {d: s for d, s in qrels[qid].items() if d in doc_ids}
        skipped["judgements_for_unknown_docs"] += len(qrels[qid]) - len(judged)
        if qid not in all_queries or not judged:
            skipped["queries_without_text"] += qid not in all_queries
            del qrels[qid]
        else:
            qrels[qid] = judged
    if not qrels:
        raise BenchmarkError(f"{folder}: no query in {qrels_path.name} has text and a judged document in the corpus")
    return RetrievalData(f"{folder.name}-{split}", corpus, {q: all_queries[q] for q in qrels}, qrels,
                         _digest(folder / "corpus.jsonl", folder / "queries.jsonl", qrels_path),
                         f"BEIR folder {folder}, split {split}", skipped)


def read_sts(path: Path, min_score: float | None = None, max_score: float | None = None) -> STSData:
    """An STS file (.jsonl/.csv/.tsv/.parquet) with ``sentence1``, ``sentence2``, ``score``;
    rows with a missing sentence or a non-numeric score are skipped and counted."""
    path = Path(path)
    if not path.is_file():
        raise BenchmarkError(f"STS file {path} not found")
    try:
        rows, invalid = file_rows(path, ("sentence1", "sentence2", "score"))
    except ValueError as exc:
        raise BenchmarkError(f"{exc} (an STS file needs sentence1, sentence2, score)") from exc
    good = []
    for s1, s2, score in rows:
        try:
            value = float(score)
        except (TypeError, ValueError):
            continue
        if isinstance(s1, str) and isinstance(s2, str) and s1.strip() and s2.strip():
            good.append({"sentence1": s1, "sentence2": s2, "score": value})
    if len(good) < 3:
        raise BenchmarkError(f"{path}: {len(good)} usable rows; Spearman needs at least 3")
    scores = [r["score"] for r in good]
    return STSData(path.stem, good, min(scores) if min_score is None else min_score,
                   max(scores) if max_score is None else max_score, _digest(path), invalid + len(rows) - len(good))


def write_beir(root: Path, corpus: list[dict], queries: dict[str, str], qrels: dict[str, dict[str, int]],
               split: str = "test") -> Path:
    """Write a BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) that :func:`read_beir` reads."""
    root.mkdir(parents=True, exist_ok=True)
    write_jsonl(root / "corpus.jsonl", [{"_id": c["id"], "title": c.get("title", ""), "text": c["text"]}
                                        for c in corpus])
    write_jsonl(root / "queries.jsonl", [{"_id": q, "text": t} for q, t in queries.items()])
    (root / "qrels").mkdir(exist_ok=True)
    (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, docs in qrels.items() for d, g in docs.items()))
    return root
