"""The consistency filter (METHOD.md, Stage 0; Appendix A of the source paper), as maths on arrays.

For a chunk of pairs with normalised query embeddings ``Q [n, d]`` and document embeddings
``D [n, d]``: build an exact inner-product index over the chunk's *distinct* documents,
retrieve for every query, and keep the pair iff its own document is among the top ``k``.

Rules, chosen so that an independent implementation on the same stored vectors agrees:

* **Duplicates.** Identical document texts in a chunk are one document (one index entry):
  a pair is never dropped because a copy of its own abstract outranks it.
* **Rank and ties.** ``rank = 1 + #{distinct documents scoring strictly higher than the
  pair's own document}``; a pair is kept iff ``rank <= k``. Ties therefore favour the pair,
  and the result does not depend on how FAISS orders equal scores.
* **Depth.** Ranks are exact up to ``depth`` (≥ k) retrieved documents; a deeper rank is
  reported as ``depth + 1`` ("beyond depth").
* **Scores** are float32 inner products of the given vectors: pass the vectors you store
  (e.g. fp16-rounded) and the stored vectors reproduce every decision.
* **Hard negatives.** The same search yields, per pair, the highest-ranked distinct documents
  that are not its own and score strictly below its own (a document at least as close to the
  query as the relevant one is likely another relevant one, a false negative; a copy of the
  own text is the same distinct document). They are the natural hard negatives of the
  InfoNCE in training.
"""

from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np


@dataclass
class ConsistencyResult:
    """Per pair: ``kept`` (bool), ``rank`` (int32, ``depth + 1`` = beyond depth), ``cosine``, and
    ``negatives`` (the pair indices of its hard-negative documents, best first; may be empty)."""

    kept: np.ndarray
    rank: np.ndarray
    cosine: np.ndarray
    negatives: list[list[int]] | None = None


def hard_negatives(scores: np.ndarray, ids: np.ndarray, own: np.ndarray, own_id: np.ndarray, n: int,
                   ) -> list[list[int]]:
    """Per query, up to ``n`` retrieved ids (best first) that are not ``own_id`` and score strictly
    below ``own`` (the query's score for its own document). ``scores``/``ids``: ``[q, depth]``."""
    ok = (ids >= 0) & (ids != own_id[:, None]) & (scores < own[:, None])
    return [row[mask][:n].tolist() for row, mask in zip(ids, ok, strict=True)]


def distinct_documents(doc_keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(index of each distinct document's first occurrence, pair → distinct-document id)."""
    first: dict[str, int] = {}
    inverse = np.empty(len(doc_keys), dtype=np.int64)
    order = []
    for i, key in enumerate(doc_keys):
        j = first.get(key)
        if j is None:
            j = first[key] = len(order)
            order.append(i)
        inverse[i] = j
    return np.asarray(order, dtype=np.int64), inverse


def search_top(
    queries: np.ndarray, docs: np.ndarray, depth: int, use_gpu: bool | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product search: (scores ``[n, depth]``, doc ids ``[n, depth]``), best first.

    ``use_gpu=None`` uses faiss-gpu whenever the installed faiss sees a GPU (same exact search)."""
    index = faiss.IndexFlatIP(docs.shape[1])
    if use_gpu is None:
        use_gpu = hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0
    if use_gpu:
        index = faiss.index_cpu_to_all_gpus(index)
    index.add(np.ascontiguousarray(docs, dtype=np.float32))
    return index.search(np.ascontiguousarray(queries, dtype=np.float32), min(depth, docs.shape[0]))


def consistency_filter(
    queries: np.ndarray,
    docs: np.ndarray,
    k: int = 2,
    doc_keys: list[str] | None = None,
    depth: int | None = None,
    use_gpu: bool | None = None,
    negatives: int = 0,
) -> ConsistencyResult:
    """Apply the rule above to one chunk. ``queries[i]`` and ``docs[i]`` form pair ``i``;
    ``doc_keys`` (e.g. document texts or hashes) identify duplicate documents. ``negatives``:
    hard negatives to keep per pair (as the index of a pair holding that document)."""
    if queries.shape != docs.shape:
        raise ValueError(f"queries {queries.shape} and documents {docs.shape} must pair up row by row")
    if k < 1:
        raise ValueError("k must be >= 1")
    depth = max(depth or max(k, 10), k, k + negatives)
    first, inverse = distinct_documents(doc_keys) if doc_keys is not None else (
        np.arange(len(docs)), np.arange(len(docs)))
    uniq = np.asarray(docs, dtype=np.float32)[first]
    q = np.asarray(queries, dtype=np.float32)
    scores, ids = search_top(q, uniq, depth, use_gpu)
    own_in = ids == inverse[:, None]
    # The own document's score: from the search where it was retrieved (same arithmetic as the
    # competitors'), else recomputed.
    own = np.where(own_in.any(1), np.where(own_in, scores, -np.inf).max(1),
                   np.einsum("nd,nd->n", q, uniq[inverse]))
    higher = ((scores > own[:, None]) & ~own_in & (ids >= 0)).sum(1)
    retrieved_all_higher = ~own_in.any(1) & (higher >= scores.shape[1])
    rank = np.where(retrieved_all_higher, depth + 1, higher + 1).astype(np.int32)
    mined = None
    if negatives:
        mined = [first[np.asarray(row, dtype=np.int64)].tolist()
                 for row in hard_negatives(scores, ids, own, inverse, negatives)]
    return ConsistencyResult(kept=rank <= k, rank=rank, cosine=np.einsum("nd,nd->n", q, uniq[inverse]),
                             negatives=mined)


def threshold_filter(queries: np.ndarray, docs: np.ndarray, threshold: float) -> ConsistencyResult:
    """The low-resource recipe: keep a pair iff cosine(q, d) >= ``threshold`` (rank: 0, unused)."""
    cosine = np.einsum("nd,nd->n", np.asarray(queries, np.float32), np.asarray(docs, np.float32))
    return ConsistencyResult(kept=cosine >= threshold, rank=np.zeros(len(cosine), np.int32), cosine=cosine)


def score_histogram(cosine: np.ndarray, bins: int = 20) -> list[tuple[float, float, int]]:
    """(low, high, count) over [-1, 1]: the distribution a user reads to pick a threshold."""
    counts, edges = np.histogram(cosine, bins=bins, range=(-1.0, 1.0))
    return [(float(lo), float(hi), int(c)) for lo, hi, c in zip(edges[:-1], edges[1:], counts, strict=True)]


def group_by_size(sizes: list[int], limit: int) -> list[list[int]]:
    """Consecutive groups of item indices whose sizes sum to at most ``limit`` (an item larger
    than ``limit`` forms its own group and is split by rows where it is filtered)."""
    groups: list[list[int]] = []
    total = limit + 1
    for i, size in enumerate(sizes):
        if total + size > limit:
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += size
    return groups
