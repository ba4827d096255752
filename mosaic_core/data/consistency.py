"""The consistency filter (docs/method.md, Stage 0; Appendix A of the source paper), as maths on arrays.

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
  that are not its own, score below its own score (or ``margin`` of it) and are no near
  duplicate of its own document (a document about as close to the query as the relevant one is likely
  another relevant one, a false negative; a copy of the own text is the same distinct
  document): :class:`~mosaic_core.config_data.NegativeRule`. They are the natural hard
  negatives of the InfoNCE in training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import faiss
import numpy as np
import torch

from mosaic_core.config_data import NegativeRule

DEFAULT_RULE = NegativeRule()


@dataclass
class ConsistencyResult:
    """Per pair: ``kept`` (bool), ``rank`` (int32, ``depth + 1`` = beyond depth), ``cosine``, and
    ``negatives`` (the pair indices of its hard-negative documents, best first; may be empty)."""

    kept: np.ndarray
    rank: np.ndarray
    cosine: np.ndarray
    negatives: list[list[int]] | None = None
    rejected: dict[str, int] = field(default_factory=dict)
    """Negatives the plain rule (any other document scoring below the positive) would have kept
    that :class:`NegativeRule` rejected, by reason: ``near_positive``, ``near_duplicate``."""


def _first(mask: np.ndarray, n: int) -> np.ndarray:
    """``mask`` with only each row's first ``n`` True entries left."""
    return mask & (np.cumsum(mask, axis=1) <= n)


def hard_negatives(scores: np.ndarray, ids: np.ndarray, own: np.ndarray, own_id: np.ndarray, n: int,
                   docs: np.ndarray | None = None, rule: NegativeRule = DEFAULT_RULE, block: int = 4096,
                   ) -> tuple[list[list[int]], dict[str, int]]:
    """(per query, up to ``n`` retrieved ids, best first, that ``rule`` allows; the counts of the
    plain rule's picks it rejected, by reason). ``scores``/``ids``: ``[q, depth]``; ``own``: each
    query's score for its own document ``own_id``; ``docs``: the document embeddings ``ids``
    index (unit rows), for the near-duplicate test (None, or ``rule.duplicate_cosine`` 1: no test),
    taken ``block`` queries at a time (their candidates' embeddings: ``block × depth × dim`` floats)."""
    plain = (ids >= 0) & (ids != own_id[:, None]) & (scores < own[:, None])
    near_positive = scores >= own[:, None] - (1.0 - rule.margin) * np.abs(own[:, None])
    duplicate = np.zeros_like(plain)
    if docs is not None and rule.duplicate_cosine < 1:
        for lo in range(0, len(ids), block):
            cand, mine = docs[np.maximum(ids[lo:lo + block], 0)], docs[own_id[lo:lo + block]]
            duplicate[lo:lo + block] = np.einsum("qkd,qd->qk", cand, mine) >= rule.duplicate_cosine
    allowed = _first(plain & ~near_positive & ~duplicate, n)
    picked = _first(plain, n)
    rejected = {"near_positive": int((picked & near_positive).sum()),
                "near_duplicate": int((picked & duplicate & ~near_positive).sum())}
    return [row[mask].tolist() for row, mask in zip(ids, allowed, strict=True)], rejected


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


Search = Literal["auto", "faiss", "torch"]


def search_top(
    queries: np.ndarray, docs: np.ndarray, depth: int, backend: Search = "auto", device: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product search: (scores ``[n, depth]``, doc ids ``[n, depth]``), best first.

    ``auto``: faiss-gpu when the installed faiss sees a GPU, else :func:`torch_search_top` on
    CUDA when torch sees one (faiss-gpu's wheels need CUDA 12; a CUDA 13 machine has torch
    only), else faiss on the CPU. All three are exact float32 searches."""
    faiss_gpu = hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0
    if backend == "auto":
        backend = "torch" if not faiss_gpu and torch.cuda.is_available() else "faiss"
    depth = min(depth, docs.shape[0])
    if backend == "torch":
        return torch_search_top(queries, docs, depth, device or ("cuda" if torch.cuda.is_available() else "cpu"))
    index = faiss.IndexFlatIP(docs.shape[1])
    if faiss_gpu:
        index = faiss.index_cpu_to_all_gpus(index)
    index.add(np.ascontiguousarray(docs, dtype=np.float32))
    return index.search(np.ascontiguousarray(queries, dtype=np.float32), depth)


def torch_search_top(queries: np.ndarray, docs: np.ndarray, depth: int, device: str = "cuda",
                     query_block: int = 4096, doc_block: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``depth`` by inner product with torch: float32 matrix products over blocks of
    queries × blocks of documents (TF32 off, so the scores are full float32 products), a running
    top-k merged block by block. Memory: ``query_block × doc_block`` scores (1 GiB at the
    defaults) plus the documents on the device."""
    dev = torch.device(device)
    d = torch.from_numpy(np.ascontiguousarray(docs, dtype=np.float32)).to(dev)
    q_all = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
    scores = np.empty((len(queries), depth), np.float32)
    ids = np.empty((len(queries), depth), np.int64)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for lo in range(0, len(queries), query_block):
            q = q_all[lo : lo + query_block].to(dev)
            best_s = torch.full((len(q), 0), -torch.inf, device=dev)
            best_i = torch.empty((len(q), 0), dtype=torch.int64, device=dev)
            for start in range(0, len(d), doc_block):
                s = q @ d[start : start + doc_block].T
                top = s.topk(min(depth, s.shape[1]), dim=1)
                best_s, where = torch.cat([best_s, top.values], 1).topk(
                    min(depth, best_s.shape[1] + top.values.shape[1]), dim=1)
                best_i = torch.cat([best_i, top.indices + start], 1).gather(1, where)
            scores[lo : lo + len(q)] = best_s.cpu().numpy()
            ids[lo : lo + len(q)] = best_i.cpu().numpy()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return scores, ids


def consistency_filter(
    queries: np.ndarray,
    docs: np.ndarray,
    k: int = 2,
    doc_keys: list[str] | None = None,
    depth: int | None = None,
    search: Search = "auto",
    negatives: int = 0,
    rule: NegativeRule = DEFAULT_RULE,
) -> ConsistencyResult:
    """Apply the rule above to one chunk. ``queries[i]`` and ``docs[i]`` form pair ``i``;
    ``doc_keys`` (e.g. document texts or hashes) identify duplicate documents. ``negatives``:
    hard negatives to keep per pair (as the index of a pair holding that document), as ``rule``
    allows them. ``search``:
    the exact search to use (:func:`search_top`); every backend gives the same decisions."""
    if queries.shape != docs.shape:
        raise ValueError(f"queries {queries.shape} and documents {docs.shape} must pair up row by row")
    if k < 1:
        raise ValueError("k must be >= 1")
    depth = max(depth or max(k, 10), k, k + negatives)
    first, inverse = distinct_documents(doc_keys) if doc_keys is not None else (
        np.arange(len(docs)), np.arange(len(docs)))
    uniq = np.asarray(docs, dtype=np.float32)[first]
    q = np.asarray(queries, dtype=np.float32)
    scores, ids = search_top(q, uniq, depth, search)
    own_in = ids == inverse[:, None]
    # The own document's score: from the search where it was retrieved (same arithmetic as the
    # competitors'), else recomputed.
    own = np.where(own_in.any(1), np.where(own_in, scores, -np.inf).max(1),
                   np.einsum("nd,nd->n", q, uniq[inverse]))
    higher = ((scores > own[:, None]) & ~own_in & (ids >= 0)).sum(1)
    retrieved_all_higher = ~own_in.any(1) & (higher >= scores.shape[1])
    rank = np.where(retrieved_all_higher, depth + 1, higher + 1).astype(np.int32)
    mined, rejected = None, {}
    if negatives:
        found, rejected = hard_negatives(scores, ids, own, inverse, negatives, uniq, rule)
        mined = [first[np.asarray(row, dtype=np.int64)].tolist() for row in found]
    return ConsistencyResult(kept=rank <= k, rank=rank, cosine=np.einsum("nd,nd->n", q, uniq[inverse]),
                             negatives=mined, rejected=rejected)


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
