"""The numbers an export is verified and described by: cosines, similarity correlation, NDCG@10, speed."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def similarity_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of the pairwise cosines of the same texts under two models (their spaces differ:
    a static model's PCA rotates it, so row-wise cosines would mean nothing)."""
    upper = np.triu_indices(len(a), k=1)
    return float(np.corrcoef((unit(a) @ unit(a).T)[upper], (unit(b) @ unit(b).T)[upper])[0, 1])


def speed(reference, candidate, texts: list[str], repeats: int = 3) -> dict:
    """Texts per second of ``reference`` (PyTorch ``encode``) and ``candidate`` on ``texts``, best of ``repeats``."""
    texts = texts * max(1, 64 // len(texts))

    def rate(fn) -> float:
        fn(texts[:4])  # warm-up
        best = min(timed(fn, texts) for _ in range(repeats))
        return len(texts) / best

    torch_rate, rate_here = rate(reference), rate(candidate)
    return {"texts_per_s_torch": round(torch_rate, 1), "texts_per_s": round(rate_here, 1),
            "speedup": round(rate_here / torch_rate, 2)}


def timed(fn, texts) -> float:
    start = time.perf_counter()
    fn(texts)
    return time.perf_counter() - start


def ndcg_at_10(encode, pairs: Sequence[tuple[str, str]]) -> float:
    """NDCG@10 (in points, 0–100) of finding each pair's document from its query among all the
    pairs' documents (one relevant document per query); ``encode`` gives unit rows."""
    queries, documents = [q for q, _ in pairs], list(dict.fromkeys(d for _, d in pairs))
    index = {d: i for i, d in enumerate(documents)}
    scores = np.asarray(encode(queries)) @ np.asarray(encode(documents)).T
    relevant = np.array([index[d] for _, d in pairs])
    ranks = (scores > scores[np.arange(len(queries)), relevant][:, None]).sum(axis=1)  # 0-based
    gains = np.where(ranks < 10, 1.0 / np.log2(ranks + 2), 0.0)
    return float(100 * gains.mean())
