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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

Pair = tuple[str, str]


def _hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


@dataclass
class Split:
    train: list[int]
    validation: list[int]
    test: list[int]


def split_sizes(n: int, n_test: int, n_validation: int = 0) -> tuple[int, int]:
    """(test, validation) sizes of :func:`split_indices` over ``n`` pairs: what was asked, capped
    at a fifth of the pairs (the validation pairs: of the pairs left after the test pairs)."""
    n_test = min(n_test, n // 5)
    return n_test, min(n_validation, (n - n_test) // 5)


def split_indices(pairs: Sequence[Pair], n_test: int, n_validation: int = 0) -> Split:
    """Indices of (training, validation, test) pairs: the ``n_test`` pairs (at most a fifth) with
    the lowest content hash are the test set, the next ``n_validation`` (at most a fifth of the
    rest) the validation set. Indices within each set keep their input order."""
    order = sorted(range(len(pairs)), key=lambda i: _hash("\x1f".join(pairs[i])))
    n_test, n_validation = split_sizes(len(pairs), n_test, n_validation)
    test, validation = set(order[:n_test]), set(order[n_test:n_test + n_validation])
    train = [i for i in range(len(pairs)) if i not in test and i not in validation]
    return Split(train, sorted(validation), sorted(test))


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
    distractors = sorted({d for _, d in train if d not in held_docs}, key=_hash)[:pool]
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
        corpus, queries, qrels = retrieval_data(train, validation, pool)
        index = {c["id"]: i for i, c in enumerate(corpus)}
        return cls(list(queries.values()), [c["text"] for c in corpus],
                   [index[next(iter(qrels[q]))] for q in queries])

    def score(self, embed: Callable[[list[str], str], torch.Tensor]) -> dict[str, float]:
        """``embed(texts, "query" | "document") -> [N, d]`` normalised embeddings."""
        q, d = embed(self.queries, "query"), embed(self.corpus, "document")
        scores = q @ d.T
        own = scores[torch.arange(len(self.relevant)), torch.tensor(self.relevant)].unsqueeze(1)
        return rank_metrics((scores > own).sum(1) + 1)
