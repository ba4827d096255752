"""Training data for a stage: the examples, which of them form batch ``g``, and collation in a
background thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

Pair = tuple[str, str]


@dataclass
class PairSet:
    """Examples of a stage: ``queries[i]`` is relevant to ``documents[i]``; ``negatives[i]`` are
    documents ranked high for ``queries[i]`` that are not relevant (hard negatives, may be empty)."""

    queries: list[str]
    documents: list[str]
    negatives: list[tuple[str, ...]] | None = None

    @classmethod
    def of(cls, data: PairSet | Sequence[Sequence[str]]) -> PairSet:
        """``data`` itself, or (query, document, *negatives) rows as a PairSet."""
        if isinstance(data, PairSet):
            return data
        rows = [tuple(r) for r in data]
        negatives = [r[2:] for r in rows] if any(len(r) > 2 for r in rows) else None
        return cls([r[0] for r in rows], [r[1] for r in rows], negatives)

    def __len__(self) -> int:
        return len(self.queries)

    def pairs(self) -> list[Pair]:
        return list(zip(self.queries, self.documents, strict=True))

    def example(self, i: int) -> tuple[str, ...]:
        """(query, document, *negatives) of example ``i``."""
        return (self.queries[i], self.documents[i], *(self.negatives[i] if self.negatives else ()))

    def subset(self, indices: Sequence[int]) -> PairSet:
        return PairSet([self.queries[i] for i in indices], [self.documents[i] for i in indices],
                       [self.negatives[i] for i in indices] if self.negatives else None)

    def negatives_per_pair(self) -> float:
        return sum(map(len, self.negatives)) / max(len(self), 1) if self.negatives else 0.0


class BatchPlan:
    """Which examples form global batch ``g``: epoch ``g // per_epoch`` shuffles with ``seed + epoch``,
    so a batch is a pure function of (seed, g) and resuming needs only the step."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.seed = n, seed
        self.batch_size = min(batch_size, n)
        self.per_epoch = n // self.batch_size
        self._epoch, self._perm = -1, None

    def indices(self, g: int) -> list[int]:
        epoch, i = divmod(g, self.per_epoch)
        if epoch != self._epoch:
            self._epoch = epoch
            self._perm = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + epoch))
        return self._perm[i * self.batch_size:(i + 1) * self.batch_size].tolist()


def prefetched(make: Callable[[int], dict], start: int, stop: int) -> Iterator[dict]:
    """``make(start)``, ``make(start + 1)``, … ``make(stop - 1)``, each built in a background thread
    while the caller trains on the one before (tokenisation releases the GIL), so the accelerator
    does not wait on collation. Closing the iterator waits for the one batch in flight."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mosaic-collate") as pool:
        pending = pool.submit(make, start) if start < stop else None
        for g in range(start, stop):
            current = pending.result()
            pending = pool.submit(make, g + 1) if g + 1 < stop else None
            yield current
