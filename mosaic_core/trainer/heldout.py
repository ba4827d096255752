"""The pairs training never sees, and how a model retrieves them.

Two disjoint sets are held out of every run's pairs, both chosen by content hash:

* the **test** pairs (the ``n_test`` lowest hashes): the held-out task of the evaluation
  report and the publish gate — nothing in training looks at them;
* the **validation** pairs (the next ``n_validation``): what a training stage scores itself
  on every ``eval_every`` steps to keep its best checkpoint.

A data root's first split records where each set ends in hash order (:class:`Threshold`: the
hash of the last pair it took). Later splits of that root take every pair up to the recorded
end (:class:`Kept`): a pair once held out stays held out, and each set grows with the corpus by
the same rule (new pairs below the threshold join it), instead of new pairs displacing old ones
from the first ``n_test``. A source with no record (a pairs file, a fresh root) is split afresh,
and a fresh root's first split is exactly the first ``n_test`` and next ``n_validation``.

Each set becomes a retrieval task: its queries over its own documents plus a pool of training
documents as distractors (also chosen by hash), the own document relevant. NDCG@10 with one
relevant document is ``1 / log2(rank + 1)`` for a rank up to 10, else 0.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import torch

from mosaic_core.data.splits import split_sizes
from mosaic_core.trainer.data import PairSet, read_rows

log = logging.getLogger(__name__)
Pair = tuple[str, str]


def _hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def text_hashes(texts: Iterable[str]) -> np.ndarray:
    """``uint64 [n]``: each text's 8-byte content hash read big-endian, so that the integers sort
    as the digests do."""
    return np.fromiter((int.from_bytes(_hash(t), "big") for t in texts), dtype=np.uint64)


def content_hashes(queries: Sequence[str | None], documents: Sequence[str]) -> np.ndarray:
    """``uint64 [n]``: each pair's content hash (:func:`text_hashes` of ``query ␟ document``; 0
    for a row without a query, which is no pair): what the split and the embedding cache key on."""
    hashes = text_hashes(f"{q}\x1f{d}" for q, d in zip(queries, documents, strict=True))
    hashes[[q is None for q in queries]] = 0
    return hashes


def _pair_hashes(batch: pa.RecordBatch) -> np.ndarray:
    return content_hashes(batch.column("query").to_pylist(), batch.column("document").to_pylist())


def pair_hashes(batches: Iterable[pa.RecordBatch]) -> np.ndarray:
    """``uint64 [n]``: the content hash of each pair (query ␟ document) of ``batches``, in order,
    holding one batch's texts at a time (:attr:`ContentHashes.pairs` without the documents')."""
    return np.concatenate([_pair_hashes(b) for b in batches] or [np.zeros(0, np.uint64)])


@dataclass
class ContentHashes:
    """Per row of an examples table: the hash of its pair (query ␟ document, as
    :func:`split_indices` hashes a pair; 0 on a row without a query) and of its document."""

    pairs: np.ndarray
    documents: np.ndarray

    @classmethod
    def of(cls, batches: Iterable[pa.RecordBatch]) -> ContentHashes:
        """The hashes of the table whose record batches are ``batches``, in order, holding one
        batch's texts at a time (give batches read from disk, not a memory-mapped table's: those
        would page in the whole file)."""
        pairs, documents = [], []
        for batch in batches:
            pairs.append(_pair_hashes(batch))
            documents.append(text_hashes(batch.column("document").to_pylist()))
        return cls(np.concatenate(pairs or [np.zeros(0, np.uint64)]),
                   np.concatenate(documents or [np.zeros(0, np.uint64)]))


@dataclass(frozen=True)
class Threshold:
    """Where a held-out set ends in content-hash order: the hash of the last pair it took, and how
    many pairs of that hash (identical pairs, in input order) it took; ``Threshold(0, 0)`` holds
    nothing. Every pair below it belongs to the set, however many pairs the corpus gains."""

    hash: int
    ties: int

    @classmethod
    def after(cls, ordered: np.ndarray, n: int) -> Threshold:
        """The end of the first ``n`` of ``ordered`` (sorted content hashes)."""
        if n == 0:
            return cls(0, 0)
        last = ordered[n - 1]
        return cls(int(last), n - int(np.searchsorted(ordered, last, "left")))

    def count(self, ordered: np.ndarray) -> int:
        """How many of ``ordered`` (sorted content hashes) lie at or below it."""
        below, upto = np.searchsorted(ordered, np.uint64(self.hash), "left"), np.searchsorted(
            ordered, np.uint64(self.hash), "right")
        return int(below) + min(self.ties, int(upto - below))


@dataclass(frozen=True)
class Kept:
    """The thresholds a data root recorded for its test and validation sets (None: none
    recorded, the set is drawn afresh: the first ``n_test``, the next ``n_validation``)."""

    test: Threshold | None = None
    validation: Threshold | None = None


@dataclass
class Split:
    """Indices (ascending ``int64`` arrays) of the training, validation and test pairs, and the
    thresholds that split them (the recorded ones, or those of a fresh split: what to record)."""

    train: np.ndarray
    validation: np.ndarray
    test: np.ndarray
    ends: Kept = field(default_factory=Kept)


def split_by_hash(hashes: np.ndarray, n_test: int, n_validation: int = 0, kept: Kept = Kept()) -> Split:
    """The split of pairs whose content hashes are ``hashes`` (``uint64 [n]``, :func:`text_hashes`
    of ``query ␟ document``; equal hashes in input order). Afresh: the ``n_test`` lowest (at most
    a fifth) are the test set, the next ``n_validation`` (at most a fifth of the rest) the
    validation set. With ``kept`` thresholds, each set is every pair up to its threshold (a
    validation set afresh starts after the test set's threshold), still at most a fifth: a set a
    shrunken corpus would hold beyond that is cut to its lowest hashes, with a warning."""
    order = np.argsort(hashes, kind="stable")
    ordered, n = hashes[order], len(hashes)
    test_end = kept.test.count(ordered) if kept.test is not None else min(n_test, n // 5)
    validation_end = kept.validation.count(ordered) if kept.validation is not None else test_end + n_validation
    n_test, n_validation = split_sizes(n, test_end, max(validation_end - test_end, 0))
    if n_test < test_end or (kept.validation is not None and n_validation < validation_end - test_end):
        log.warning("the recorded held-out thresholds hold %d test and %d validation pairs of %d, more than a "
                    "fifth each: the lowest %d and %d are held out", test_end, validation_end - test_end, n,
                    n_test, n_validation)
    part = np.zeros(n, dtype=np.int8)
    part[order[:n_test]], part[order[test_end:test_end + n_validation]] = 1, 2
    fresh_validation = Threshold.after(ordered, test_end + n_validation) if n_validation else Threshold(0, 0)
    ends = Kept(kept.test if kept.test is not None else Threshold.after(ordered, n_test),
                kept.validation if kept.validation is not None else fresh_validation)
    return Split(np.flatnonzero(part == 0), np.flatnonzero(part == 2), np.flatnonzero(part == 1), ends)


def held_out_change(previous: np.ndarray | None, current: np.ndarray) -> dict[str, int | None]:
    """How the test set whose pair hashes are ``current`` differs from an earlier one's
    (``previous``; None: no earlier set): its size, the pairs that joined it (new pairs below its
    threshold), the pairs gone from it (their citation deleted or revised), the earlier size."""
    if previous is None:
        return {"pairs": len(current), "added": None, "gone": None, "previous": None}
    return {"pairs": len(current), "added": int((~np.isin(current, previous)).sum()),
            "gone": int((~np.isin(previous, current)).sum()), "previous": len(previous)}


def split_indices(pairs: Sequence[Pair], n_test: int, n_validation: int = 0) -> Split:
    """Indices of (training, validation, test) pairs by content hash (:func:`split_by_hash`)."""
    return split_by_hash(text_hashes("\x1f".join(p) for p in pairs), n_test, n_validation)


def split_heldout(pairs: list[Pair], n: int) -> tuple[list[Pair], list[Pair]]:
    """(every pair but the test pairs, the test pairs): what the evaluation's held-out task uses."""
    split = split_indices(pairs, n)
    return [pairs[i] for i in split.train], [pairs[i] for i in split.test]


def retrieval_data(train: Sequence[Pair], heldout: Sequence[Pair], pool: int = 10_000,
                   ) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    """In-domain retrieval from a run's own pairs: the held-out queries, each relevant to its own
    document, over the held-out documents plus up to ``pool`` training documents (chosen by
    content hash, so the pool is stable) as distractors."""
    held_docs = {d for _, d in heldout}
    return retrieval_task(heldout, sorted({d for _, d in train if d not in held_docs}, key=_hash)[:pool])


def retrieval_task(heldout: Sequence[Pair], distractors: Sequence[str],
                   ) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    """(corpus, queries, qrels): the ``heldout`` queries over their documents and ``distractors``."""
    doc_id = {d: f"d{i}" for i, d in enumerate(dict.fromkeys([*(d for _, d in heldout), *distractors]))}
    corpus = [{"id": i, "title": "", "text": d} for d, i in doc_id.items()]
    queries, qrels = {}, {}
    for n, (q, d) in enumerate(heldout):
        queries[f"q{n}"] = q
        qrels[f"q{n}"] = {doc_id[d]: 1}
    return corpus, queries, qrels


SELECT_METRIC = "ndcg@10"
"""The validation metric a stage keeps its best model on, and the merge step its weight."""


def rank_metrics(ranks: torch.Tensor) -> dict[str, float]:
    """NDCG@10, MRR and recall@1 from the 1-based rank of each query's one relevant document."""
    ranks = ranks.double()
    ndcg = torch.where(ranks <= 10, 1.0 / torch.log2(ranks + 1), torch.zeros_like(ranks))
    return {SELECT_METRIC: float(ndcg.mean()), "mrr": float((1.0 / ranks).mean()),
            "recall@1": float((ranks == 1).double().mean()), "n": len(ranks)}


@dataclass
class RetrievalProbe:
    """Validation retrieval during training: ``queries[i]`` is relevant to ``corpus[relevant[i]]``."""

    queries: list[str]
    corpus: list[str]
    relevant: list[int]

    @classmethod
    def from_pairs(cls, train: Sequence[Pair], validation: Sequence[Pair], pool: int) -> RetrievalProbe:
        """The ``validation`` queries over their documents and ``pool`` of ``train``'s (:func:`retrieval_data`)."""
        return cls.of_task(*retrieval_data(train, validation, pool))

    @classmethod
    def with_distractors(cls, validation: Sequence[Pair], distractors: Sequence[str]) -> RetrievalProbe:
        """The ``validation`` queries over their documents and ``distractors`` (:func:`retrieval_task`)."""
        return cls.of_task(*retrieval_task(validation, distractors))

    @classmethod
    def of_task(cls, corpus: list[dict], queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> RetrievalProbe:
        """The probe of a retrieval task as :func:`retrieval_task` gives it."""
        index = {c["id"]: i for i, c in enumerate(corpus)}
        return cls(list(queries.values()), [c["text"] for c in corpus],
                   [index[next(iter(qrels[q]))] for q in queries])

    def score(self, embed: Callable[[list[str], str], torch.Tensor]) -> dict[str, float]:
        """``embed(texts, "query" | "document") -> [N, d]`` normalised embeddings."""
        q, d = embed(self.queries, "query"), embed(self.corpus, "document")
        scores = q @ d.T
        own = scores[torch.arange(len(self.relevant)), torch.tensor(self.relevant)].unsqueeze(1)
        return rank_metrics((scores > own).sum(1) + 1)


def distractor_rows(rows: np.ndarray, documents: np.ndarray, held: np.ndarray, pool: int) -> np.ndarray:
    """:func:`retrieval_data`'s distractors, chosen from hashes alone: of the table ``rows``, those
    of up to ``pool`` distinct documents whose hashes (``documents``, per table row) are not in
    ``held``, lowest hash first (the first row of each document)."""
    hashes = documents[rows]
    candidates = np.flatnonzero(~np.isin(hashes, held))
    _, first = np.unique(hashes[candidates], return_index=True)  # sorted by hash
    return rows[candidates[first[:pool]]]


def heldout_split(batches: Callable[[], Iterable[pa.RecordBatch]], n_test: int, pool: int, n_validation: int = 0,
                  held: str = "test", kept: Kept = Kept()) -> tuple[list[Pair], list[str], int]:
    """(held-out pairs, distractor documents, number of pairs) of the table whose record batches
    (``query`` and ``document`` columns) ``batches()`` streams, in two passes holding two
    ``uint64`` per row and the picked texts, never the table. ``held="test"``: :func:`split_heldout`'s
    test pairs and :func:`retrieval_data`'s distractors; ``"validation"``: the validation pairs
    of :func:`split_by_hash` (``n_test``, ``n_validation``) over up to ``pool`` training documents,
    the retrieval a training stage validates on (:func:`split_examples`); ``kept``: the source's
    recorded thresholds."""
    hashes = ContentHashes.of(batches())
    split = split_by_hash(hashes.pairs, n_test, n_validation, kept)
    chosen = split.validation if held == "validation" else split.test
    distractors = distractor_rows(split.train, hashes.documents, hashes.documents[chosen], pool)
    texts = read_rows(batches(), np.concatenate([chosen, distractors]))
    return [texts[r] for r in chosen], [texts[r][1] for r in distractors], len(hashes.pairs)


def _training(data: PairSet, hashes: ContentHashes, n_test: int, n_validation: int, kept: Kept,
              ) -> tuple[PairSet, Split]:
    """(the training examples of ``data``, the test and validation pairs held out and their
    documents skipped as negatives; the split)."""
    split = split_by_hash(hashes.pairs[data.rows], n_test, n_validation, kept)
    train = data.subset(split.train)
    if data.has_negatives:
        held = hashes.documents[data.rows[np.concatenate([split.validation, split.test])]]
        train = train.skipping(np.isin(hashes.documents, held))
    return train, split


def training_examples(data: PairSet, batches: Callable[[], Iterable[pa.RecordBatch]], n_test: int,
                      n_validation: int, kept: Kept = Kept()) -> PairSet:
    """The training examples :func:`split_examples` gives (the same rows, the same negatives
    skipped), without reading the validation probe's texts."""
    return _training(data, ContentHashes.of(batches()), n_test, n_validation, kept)[0]


def split_examples(data: PairSet, batches: Callable[[], Iterable[pa.RecordBatch]], n_test: int, n_validation: int,
                   pool: int, kept: Kept = Kept()) -> tuple[PairSet, RetrievalProbe | None]:
    """(training examples, validation retrieval) of ``data``, the examples of a whole table;
    ``batches()`` streams the table's record batches (from disk: each pass over every row holds
    one batch's texts, never all of them). :func:`split_by_hash` of the pairs (with the source's
    recorded thresholds ``kept``) holds the test and validation pairs out; their documents are
    left out of the training pairs' hard negatives (by
    content hash); the validation queries retrieve over their documents and ``pool`` training
    documents (:func:`retrieval_data`). Memory: two ``uint64`` per table row and the probe's texts."""
    hashes = ContentHashes.of(batches())
    train, split = _training(data, hashes, n_test, n_validation, kept)
    if not len(split.validation):
        return train, None
    validation = data.rows[split.validation]
    distractors = distractor_rows(train.rows, hashes.documents, hashes.documents[validation], pool)
    texts = read_rows(batches(), np.concatenate([validation, distractors]))
    return train, RetrievalProbe.with_distractors([texts[r] for r in validation], [texts[r][1] for r in distractors])
