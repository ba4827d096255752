"""The pairs training never sees, and how a model retrieves them.

Two disjoint sets are held out of every run's pairs, both chosen by content hash so they stay
put as new snapshots add pairs:

* the **test** pairs (the ``n_test`` lowest hashes): the held-out task of the evaluation
  report and the publish gate — nothing in training looks at them;
* the **validation** pairs (the next ``n_validation``): what a training stage scores itself
  on every ``eval_every`` steps to keep its best checkpoint.

Each set becomes a retrieval task: its queries over its own documents plus a pool of training
documents as distractors (also chosen by hash), the own document relevant. NDCG@10 with one
relevant document is ``1 / log2(rank + 1)`` for a rank up to 10, else 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from mosaic_core.data.splits import split_sizes
from mosaic_core.trainer.data import PairSet, read_rows

Pair = tuple[str, str]


def _hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def text_hashes(texts: Iterable[str]) -> np.ndarray:
    """``uint64 [n]``: each text's 8-byte content hash read big-endian, so that the integers sort
    as the digests do."""
    return np.fromiter((int.from_bytes(_hash(t), "big") for t in texts), dtype=np.uint64)


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
            queries, docs = batch.column("query").to_pylist(), batch.column("document").to_pylist()
            pairs.append(text_hashes(f"{q}\x1f{d}" for q, d in zip(queries, docs, strict=True)))
            pairs[-1][[q is None for q in queries]] = 0  # a document-only row is no pair
            documents.append(text_hashes(docs))
        return cls(np.concatenate(pairs or [np.zeros(0, np.uint64)]),
                   np.concatenate(documents or [np.zeros(0, np.uint64)]))


@dataclass
class Split:
    """Indices (ascending ``int64`` arrays) of the training, validation and test pairs."""

    train: np.ndarray
    validation: np.ndarray
    test: np.ndarray


def split_by_hash(hashes: np.ndarray, n_test: int, n_validation: int = 0) -> Split:
    """The split of pairs whose content hashes are ``hashes`` (``uint64 [n]``, :func:`text_hashes`
    of ``query ␟ document``): the ``n_test`` lowest (at most a fifth) are the test set, the next
    ``n_validation`` (at most a fifth of the rest) the validation set; equal hashes keep input order."""
    order = np.argsort(hashes, kind="stable")
    n_test, n_validation = split_sizes(len(hashes), n_test, n_validation)
    part = np.zeros(len(hashes), dtype=np.int8)
    part[order[:n_test]], part[order[n_test:n_test + n_validation]] = 1, 2
    return Split(np.flatnonzero(part == 0), np.flatnonzero(part == 2), np.flatnonzero(part == 1))


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
                  held: str = "test") -> tuple[list[Pair], list[str], int]:
    """(held-out pairs, distractor documents, number of pairs) of the table whose record batches
    (``query`` and ``document`` columns) ``batches()`` streams, in two passes holding two
    ``uint64`` per row and the picked texts, never the table. ``held="test"``: :func:`split_heldout`'s
    test pairs and :func:`retrieval_data`'s distractors; ``"validation"``: the validation pairs
    of :func:`split_by_hash` (``n_test``, ``n_validation``) over up to ``pool`` training documents,
    the retrieval a training stage validates on (:func:`split_examples`)."""
    hashes = ContentHashes.of(batches())
    split = split_by_hash(hashes.pairs, n_test, n_validation)
    chosen = split.validation if held == "validation" else split.test
    distractors = distractor_rows(split.train, hashes.documents, hashes.documents[chosen], pool)
    texts = read_rows(batches(), np.concatenate([chosen, distractors]))
    return [texts[r] for r in chosen], [texts[r][1] for r in distractors], len(hashes.pairs)


def _training(data: PairSet, hashes: ContentHashes, n_test: int, n_validation: int) -> tuple[PairSet, Split]:
    """(the training examples of ``data``, the test and validation pairs held out and their
    documents skipped as negatives; the split)."""
    split = split_by_hash(hashes.pairs[data.rows], n_test, n_validation)
    train = data.subset(split.train)
    if data.has_negatives:
        held = hashes.documents[data.rows[np.concatenate([split.validation, split.test])]]
        train = train.skipping(np.isin(hashes.documents, held))
    return train, split


def training_examples(data: PairSet, batches: Callable[[], Iterable[pa.RecordBatch]], n_test: int,
                      n_validation: int) -> PairSet:
    """The training examples :func:`split_examples` gives (the same rows, the same negatives
    skipped), without reading the validation probe's texts."""
    return _training(data, ContentHashes.of(batches()), n_test, n_validation)[0]


def split_examples(data: PairSet, batches: Callable[[], Iterable[pa.RecordBatch]], n_test: int, n_validation: int,
                   pool: int) -> tuple[PairSet, RetrievalProbe | None]:
    """(training examples, validation retrieval) of ``data``, the examples of a whole table;
    ``batches()`` streams the table's record batches (from disk: each pass over every row holds
    one batch's texts, never all of them). :func:`split_by_hash` of the pairs holds the test and
    validation pairs out; their documents are left out of the training pairs' hard negatives (by
    content hash); the validation queries retrieve over their documents and ``pool`` training
    documents (:func:`retrieval_data`). Memory: two ``uint64`` per table row and the probe's texts."""
    hashes = ContentHashes.of(batches())
    train, split = _training(data, hashes, n_test, n_validation)
    if not len(split.validation):
        return train, None
    validation = data.rows[split.validation]
    distractors = distractor_rows(train.rows, hashes.documents, hashes.documents[validation], pool)
    texts = read_rows(batches(), np.concatenate([validation, distractors]))
    return train, RetrievalProbe.with_distractors([texts[r] for r in validation], [texts[r][1] for r in distractors])
