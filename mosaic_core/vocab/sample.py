"""Stage 1's corpus sample: a fixed number of texts, whatever the corpus size.

Stage 1 learns which words the domain uses and how often; a few hundred thousand texts say that
as well as twenty million (docs/benchmarks.md measures what the sample size changes), and every
step of stage 1 (tokenizer training, word counts, selection, distillation) then costs the same
on a snapshot as on the sample. The sample is the ``k`` texts with the smallest content hash (a
bottom-k sketch): read in one streaming pass in memory bounded by ``k``, the same for the same
corpus, and stable as a corpus grows (a text in the sample stays in it unless ``k`` texts with
smaller hashes arrive), so a rebuild on a new snapshot keeps most of the last one's evidence.
A corpus of at most ``k`` texts is used whole, in its own order.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable
from dataclasses import dataclass


def _rank(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class CorpusSample:
    """The sampled texts in corpus order, and how many texts the corpus had."""

    texts: list[str]
    corpus_texts: int

    @property
    def whole(self) -> bool:
        return len(self.texts) == self.corpus_texts


def bottom_k(texts: Iterable[str], k: int) -> CorpusSample:
    """The ``k`` texts of ``texts`` with the smallest content hash (ties: the earlier text), in
    the order they came; one pass, at most ``k`` texts held."""
    if k <= 0:
        raise ValueError(f"a corpus sample needs k > 0 texts, got {k}")
    heap: list[tuple[int, int, str]] = []  # (-hash, -position, text): the root is the largest kept
    n = 0
    for n, text in enumerate(texts, start=1):
        key = (-_rank(text), -n, text)
        if len(heap) < k:
            heapq.heappush(heap, key)
        elif key > heap[0]:
            heapq.heapreplace(heap, key)
    return CorpusSample([text for _, _, text in sorted(heap, key=lambda item: -item[1])], n)
