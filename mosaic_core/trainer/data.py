"""Training data for a stage: the examples (an Arrow table, memory-mapped from disk for a real
corpus), which of them form batch ``g``, and collation in a background thread."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

Pair = tuple[str, str]

EXAMPLES = pa.schema([pa.field("query", pa.large_string()), pa.field("document", pa.large_string()),
                      pa.field("negatives", pa.list_(pa.int64()))])
"""The columns of an examples table (storage writes files of this layout)."""

MARGINS = pa.field("margins", pa.list_(pa.float32()))
"""An examples table's optional fourth column: per row, a teacher's margin for each of its
``negatives``, in their order (its score of the query with the row's document minus its score
with the negative's): MarginMSE's labels."""

_COUNT_BLOCK = 65_536  # examples whose negatives are read at once when counting them


class PairSet:
    """Examples of a stage over one Arrow table (:data:`EXAMPLES`): ``query`` is relevant to
    ``document``; ``negatives`` are rows of the same table whose documents are hard negatives of
    the query (ranked high, not relevant; may be empty), so each document text is held once
    however many queries it is a negative of. A row without a query holds a document only (a
    negative that is no example's document).

    Example ``i`` is table row ``rows[i]`` (default: every row with a query, in table order); a
    subset is another row array over the same table, no text copied. ``skip`` (bool per table
    row) marks documents that may not serve as negatives: the held-out ones. The table may be
    memory-mapped from disk: texts are read one example at a time, by :meth:`example`. A table
    with a :data:`MARGINS` column also has the teacher's margins of the negatives (:meth:`margins`)."""

    def __init__(self, table: pa.Table, rows: np.ndarray | None = None, skip: np.ndarray | None = None):
        missing = [c for c in EXAMPLES.names if c not in table.column_names]
        if missing:
            raise ValueError(f"an examples table needs the columns {EXAMPLES.names}; this one lacks {missing}")
        self.table, self.skip = table, skip
        self._query, self._document, self._negatives = (table.column(c) for c in EXAMPLES.names)
        self.rows = (np.flatnonzero(self._query.is_valid().to_numpy(zero_copy_only=False)) if rows is None
                     else np.asarray(rows, dtype=np.int64))
        self.has_negatives = bool(pc.sum(pc.list_value_length(self._negatives)).as_py())
        """Whether any row of the table has a hard negative (held-out ones included)."""
        self._margins = table.column(MARGINS.name) if MARGINS.name in table.column_names else None

    @property
    def has_margins(self) -> bool:
        """Whether the table carries a teacher's margins of its negatives."""
        return self._margins is not None

    @classmethod
    def of(cls, data: PairSet | Sequence[Sequence[str]]) -> PairSet:
        """``data`` itself, or (query, document, *negatives) rows as a PairSet held in memory (a
        small set: tests, benchmarks). A negative that is some row's document refers to that
        row; any other becomes a row of its own."""
        if isinstance(data, PairSet):
            return data
        rows = [tuple(r) for r in data]
        row_of: dict[str, int] = {}
        for i, r in enumerate(rows):
            row_of.setdefault(r[1], i)
        extra: list[str] = []

        def ref(text: str) -> int:
            if text not in row_of:
                row_of[text] = len(rows) + len(extra)
                extra.append(text)
            return row_of[text]

        negatives = [[ref(n) for n in r[2:]] for r in rows]
        return cls(pa.table({"query": [r[0] for r in rows] + [None] * len(extra),
                             "document": [r[1] for r in rows] + extra,
                             "negatives": negatives + [[] for _ in extra]}, schema=EXAMPLES))

    def __len__(self) -> int:
        return len(self.rows)

    def document(self, i: int) -> str:
        """The document of example ``i``."""
        return self._document[int(self.rows[i])].as_py()

    def example(self, i: int) -> tuple[str, ...]:
        """(query, document, *hard-negative documents) of example ``i``: only this row's texts are read."""
        row = int(self.rows[i])
        refs = self._negatives[row].as_py()
        negatives = (self._document[n].as_py() for n in refs if self.skip is None or not self.skip[n])
        return (self._query[row].as_py(), self._document[row].as_py(), *negatives)

    def margins(self, i: int) -> list[float]:
        """The teacher's margins of the hard negatives :meth:`example` gives for example ``i``, in
        their order (the skipped ones left out alike)."""
        if self._margins is None:
            raise ValueError("these examples carry no teacher margins (no margins column)")
        row = int(self.rows[i])
        pairs = zip(self._negatives[row].as_py(), self._margins[row].as_py(), strict=True)
        return [m for n, m in pairs if self.skip is None or not self.skip[n]]

    def subset(self, indices: Sequence[int] | np.ndarray) -> PairSet:
        """Examples ``indices`` of this set, in that order, over the same table."""
        return PairSet(self.table, self.rows[np.asarray(indices, dtype=np.int64)], self.skip)

    def skipping(self, skip: np.ndarray) -> PairSet:
        """These examples, with the documents of the table rows ``skip`` marks left out of their negatives."""
        return PairSet(self.table, self.rows, skip)

    def joined(self, other: PairSet) -> PairSet:
        """These examples, then every example of ``other`` (a table of its own: extra pairs such as a
        glossary's definition pairs), over one table: ``other``'s rows follow this table's, its
        negatives moved with them; nothing of either is skipped that was not before. A labelled
        table gets ``other``'s margins, or NaN for each of its negatives where ``other`` has none."""
        offset = self.table.num_rows
        negatives = other.table.column("negatives").combine_chunks()
        columns = {"query": other.table.column("query"), "document": other.table.column("document"),
                   "negatives": pa.ListArray.from_arrays(negatives.offsets, pc.add(negatives.values, offset),
                                                         mask=negatives.is_null())}
        if self.has_margins:  # none known: NaN, which a margin_mse batch refuses to train on
            columns[MARGINS.name] = (other.table.column(MARGINS.name) if other.has_margins else pa.array(
                [[float("nan")] * len(n) for n in other.table.column("negatives").to_pylist()], MARGINS.type))
        extra = pa.table(columns, schema=self.table.select(list(columns)).schema)
        table = pa.concat_tables([self.table.select(list(columns)), extra])
        skip = None if self.skip is None and other.skip is None else np.concatenate([
            self.skip if self.skip is not None else np.zeros(offset, dtype=bool),
            other.skip if other.skip is not None else np.zeros(other.table.num_rows, dtype=bool)])
        return PairSet(table, np.concatenate([self.rows, other.rows + offset]), skip)

    def negatives_per_pair(self) -> float:
        """Hard negatives per example, the skipped ones left out (read in blocks of row numbers)."""
        if not self.has_negatives:
            return 0.0
        total = 0
        for lo in range(0, len(self.rows), _COUNT_BLOCK):
            refs = pc.list_flatten(self._negatives.take(self.rows[lo:lo + _COUNT_BLOCK])).to_numpy()
            total += len(refs) if self.skip is None else int((~self.skip[refs]).sum())
        return total / max(len(self), 1)


def read_rows(batches: Iterable[pa.RecordBatch], rows: np.ndarray) -> dict[int, Pair]:
    """(query, document) of the table ``rows``, picked from the table's record batches in one pass
    (for a few rows of a table on disk: a random read of a memory-mapped file pages in far more
    than the row)."""
    wanted, found, lo = np.unique(rows), {}, 0
    for batch in batches:
        hi = lo + batch.num_rows
        here = wanted[(wanted >= lo) & (wanted < hi)]
        if len(here):
            picked = batch.select(["query", "document"]).take(pa.array(here - lo)).to_pylist()
            found.update((int(r), (p["query"], p["document"])) for r, p in zip(here, picked, strict=True))
        lo = hi
    return found


class BatchPlan:
    """Which examples form global batch ``g``: epoch ``g // per_epoch`` shuffles with ``seed + epoch``,
    so a batch is a pure function of (seed, g) and resuming needs only the step. Safe to call from
    several collation threads."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.seed = n, seed
        self.batch_size = min(batch_size, n)
        self.per_epoch = n // self.batch_size
        self._epoch, self._perm = -1, None
        self._lock = threading.Lock()

    def indices(self, g: int) -> list[int]:
        epoch, i = divmod(g, self.per_epoch)
        with self._lock:
            if epoch != self._epoch:
                self._epoch = epoch
                self._perm = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + epoch))
            perm = self._perm
        return perm[i * self.batch_size:(i + 1) * self.batch_size].tolist()


def prefetched(make: Callable[[int], dict], start: int, stop: int, threads: int = 1) -> Iterator[dict]:
    """``make(start)``, ``make(start + 1)``, … ``make(stop - 1)`` in order, built by ``threads``
    background threads, that many batches ahead, while the caller trains on the one before
    (tokenisation releases the GIL), so the accelerator does not wait on collation. A batch is a
    function of its number alone, so the batches are the same whatever ``threads``. Closing the
    iterator waits for the batches in flight."""
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mosaic-collate") as pool:
        pending = deque(pool.submit(make, g) for g in range(start, min(start + threads, stop)))
        ahead = start + len(pending)
        while pending:
            current = pending.popleft().result()
            if ahead < stop:
                pending.append(pool.submit(make, ahead))
                ahead += 1
            yield current
