"""bench/retrieval.py's scoring for the quality benches: NDCG@10 per query with a document left
out of a query's ranking, and the Islamic verse task as the pipeline's evaluation builds it (a
hand-made verse collection and pairs file; no model is loaded)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from builders import bench_script


@pytest.fixture(scope="module")
def retrieval():
    return bench_script("retrieval")


class Vectors:
    """A stand-in encoder: each text's vector from a table."""

    def __init__(self, table: dict[str, list[float]]):
        self.table = table

    def encode(self, texts, normalize_embeddings, batch_size, convert_to_tensor):
        return torch.nn.functional.normalize(torch.tensor([self.table[t] for t in texts]), dim=1)


def test_excluded_document_leaves_the_ranking(retrieval):
    model = Vectors({"q": [1.0, 0.0], "own": [1.0, 0.0], "cited": [0.9, 0.1], "other": [0.0, 1.0]})
    docs = ["own", "other", "cited"]
    kept = retrieval.ndcg_per_query(model, ["q"], docs, [{2}])
    left_out = retrieval.ndcg_per_query(model, ["q"], docs, [{2}], excluded=[0])
    assert kept == [pytest.approx(1 / math.log2(3))]  # the query's own text ranks first, the cited second
    assert left_out == [1.0]


def test_verse_task_holds_out_links_and_names_each_querys_own_verse(tmp_path, retrieval):
    quran = tmp_path / "quran.txt"
    verses = {(1, a): f"verse one {a} about mercy and guidance number {a}" for a in range(1, 41)}
    quran.write_text("".join(f"{s}|{a}|{t}\n" for (s, a), t in verses.items()))
    links = [(verses[(1, a)], verses[(1, a + 1)]) for a in range(1, 41, 2)]  # no verse in two links
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": q, "document": d}) + "\n" for q, d in links))

    queries, docs, relevant, excluded = retrieval.verses(pairs, quran, heldout_pairs=3)

    assert len(docs) == 40 and len(queries) == 3  # every verse a document; three links held out (<= a fifth)
    for query, rel, own in zip(queries, relevant, excluded, strict=True):
        assert docs[own] == query  # the query's own verse, left out of its ranking
        (cited,) = rel
        assert (query, docs[cited]) in links
