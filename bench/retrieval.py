"""What the quality benches share: JSONL, NDCG@10 per query with a sentence-transformers model,
95 % paired bootstrap intervals, SciFact's train claims over its corpus as (queries,
documents, relevant sets), and the Islamic verse task as (queries, documents, relevant sets,
excluded documents)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def recorder(path: Path, results: dict) -> Callable[..., None]:
    """``event(what, **fields)``: appends the event (with the seconds since now) to
    ``results["events"]``, rewrites ``path`` with ``results`` (so a run cut short keeps what
    finished) and prints it."""
    started = time.time()

    def event(what: str, **fields) -> None:
        results["events"].append({"what": what, "t": round(time.time() - started, 1), **fields})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1))
        print("##", json.dumps(results["events"][-1])[:400], flush=True)

    return event


def read_jsonl(path: Path) -> list[dict]:
    with path.open() as lines:  # not splitlines(): a text may hold U+2028
        return [json.loads(line) for line in lines if line.strip()]


def ndcg_per_query(model, queries: list[str], docs: list[str], relevant: list[set[int]],
                   excluded: list[int | None] | None = None) -> list[float]:
    """NDCG@10 of each query over ``docs`` (``relevant``: indices of its relevant documents;
    ``excluded``: a document left out of each query's ranking, or None, as mteb's
    ``ignore_identical_ids`` leaves out a query's own document)."""
    q = model.encode(queries, normalize_embeddings=True, batch_size=256, convert_to_tensor=True)
    d = model.encode(docs, normalize_embeddings=True, batch_size=256, convert_to_tensor=True)
    scores = q @ d.T
    for i, j in enumerate(excluded or []):
        if j is not None:
            scores[i, j] = float("-inf")
    top = scores.topk(min(10, len(docs)), dim=1).indices.cpu().numpy()
    out = []
    for ranked, rel in zip(top, relevant, strict=True):
        dcg = sum(1 / math.log2(k + 2) for k, j in enumerate(ranked) if j in rel)
        out.append(dcg / sum(1 / math.log2(k + 2) for k in range(min(10, len(rel)))))
    return out


def paired(a: list[float], b: list[float], resamples: int = 2000) -> dict:
    """Mean of a − b × 100 and its 95 % paired bootstrap interval (seeded)."""
    diff = 100 * (np.asarray(a) - np.asarray(b))
    means = np.random.default_rng(0).choice(diff, (resamples, len(diff))).mean(1)
    return {"diff": round(float(diff.mean()), 2), "low": round(float(np.percentile(means, 2.5)), 2),
            "high": round(float(np.percentile(means, 97.5)), 2)}


def scifact(folder: Path, small: bool = False) -> tuple[list[str], list[str], list[set[int]]]:
    """SciFact's train claims over its corpus (title and text): (queries, documents, relevant
    sets); ``small``: 20 claims over their documents and 300 others."""
    corpus = read_jsonl(folder / "corpus.jsonl")
    index = {str(c["_id"]): i for i, c in enumerate(corpus)}
    claims = {str(q["_id"]): q["text"] for q in read_jsonl(folder / "queries.jsonl")}
    qrels: dict[str, set[int]] = {}
    for line in (folder / "qrels" / "train.tsv").read_text().splitlines()[1:]:
        qid, doc, score = line.split("\t")
        if float(score) > 0 and doc in index:
            qrels.setdefault(qid, set()).add(index[doc])
    qids = sorted(q for q in qrels if q in claims)[: 20 if small else None]
    keep = sorted({i for q in qids for i in qrels[q]} | set(range(300))) if small else range(len(corpus))
    at = {old: new for new, old in enumerate(keep)}
    return ([claims[q] for q in qids], [(corpus[i].get("title", "") + " " + corpus[i]["text"]).strip() for i in keep],
            [{at[i] for i in qrels[q]} for q in qids])


def verses(pairs: Path, quran: Path, heldout_pairs: int = 256) -> tuple[list[str], list[str], list[set[int]],
                                                                        list[int | None]]:
    """The Islamic verse task as the pipeline's ``verses`` evaluation builds it (its held-out links
    of the verse pairs at ``pairs``, a ``mosaic pairs islamic`` data root or file, over every verse
    of ``quran``): (queries, documents, relevant sets, each query's own verse to leave out)."""
    from mosaic_core.eval_tasks import VersesTask
    from tasks.evaluate import READERS

    spec = VersesTask(name="verses", path=str(pairs), collection=str(quran), heldout_pairs=heldout_pairs)
    heldout, _ = spec.held_out(READERS, 0)
    corpus, queries, qrels, _ = READERS.verse_retrieval_data(heldout, READERS.read_verses(quran))
    index = {c["id"]: i for i, c in enumerate(corpus)}
    qids = sorted(qrels)
    return ([queries[q] for q in qids], [c["text"] for c in corpus], [{index[d] for d in qrels[q]} for q in qids],
            [index.get(q) for q in qids])
