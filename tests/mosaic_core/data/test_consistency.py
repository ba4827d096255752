import functools

import numpy as np
import pytest

from mosaic_core.config_data import NegativeRule
from mosaic_core.data import consistency
from mosaic_core.data.consistency import consistency_filter, score_histogram, threshold_filter


def unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def naive(q, d, keys, k):
    """Reference: full score matrix over distinct documents, rank by strict counting."""
    uniq_keys = list(dict.fromkeys(keys))
    first = [keys.index(u) for u in uniq_keys]
    uniq = d[first]
    own_idx = np.array([uniq_keys.index(kk) for kk in keys])
    scores = q @ uniq.T
    own = scores[np.arange(len(q)), own_idx]
    rank = 1 + (scores > own[:, None]).sum(1)
    return rank <= k, rank


@pytest.mark.parametrize("k", [1, 2, 5])
def test_matches_naive_reference(k):
    rng = np.random.default_rng(k)
    q = unit(rng.normal(size=(400, 16)))
    d = unit(q + rng.normal(scale=0.35, size=q.shape))  # noisy: a real mix of kept and dropped
    keys = [str(i) for i in range(len(q))]
    res = consistency_filter(q, d, k=k, doc_keys=keys, depth=400)
    kept, rank = naive(q, d, keys, k)
    assert 0.1 < kept.mean() < 0.95
    np.testing.assert_array_equal(res.kept, kept)
    np.testing.assert_array_equal(res.rank, rank)
    np.testing.assert_allclose(res.cosine, (q * d).sum(1), rtol=1e-5)


def test_rank_beyond_depth_is_depth_plus_one():
    rng = np.random.default_rng(0)
    q = unit(rng.normal(size=(300, 8)))
    d = unit(rng.normal(size=(300, 8)))  # unrelated: most own documents rank deep
    res = consistency_filter(q, d, k=2, depth=10)
    _, rank = naive(q, d, [str(i) for i in range(300)], 2)
    np.testing.assert_array_equal(res.rank, np.where(rank > 10, 11, rank))
    np.testing.assert_array_equal(res.kept, rank <= 2)


def test_duplicate_documents_do_not_fail_a_correct_pair():
    # Pairs 0 and 1 share an abstract (different titles); its two embeddings differ in the last
    # bits, as they can when the copies are encoded in different batches.
    q = unit(np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.2], [0.0, 0.0, 1.0]]))
    d = unit(np.array([[1.0, 0.1, 0.0], [1.0, 0.1001, 0.0], [0.0, 0.0, 1.0]]))
    without = consistency_filter(q, d, k=1)
    assert without.kept.tolist() == [True, False, True]  # the copy outranks pair 1's own document
    with_keys = consistency_filter(q, d, k=1, doc_keys=["a", "a", "c"])
    assert with_keys.kept.tolist() == [True, True, True]
    assert with_keys.rank.tolist() == [1, 1, 1]


def test_ties_favour_the_pair():
    q = unit(np.array([[1.0, 0.0], [1.0, 0.0]]))
    d = unit(np.array([[1.0, 1.0], [1.0, -1.0]]))  # both documents score exactly 0.7071 for both queries
    res = consistency_filter(q, d, k=1)
    assert res.kept.tolist() == [True, True] and res.rank.tolist() == [1, 1]


def test_threshold_and_histogram():
    q = unit(np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]))
    d = unit(np.array([[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0]]))
    res = threshold_filter(q, d, 0.7)
    assert res.kept.tolist() == [True, True, False]
    hist = score_histogram(res.cosine, bins=4)
    assert sum(c for _, _, c in hist) == 3 and hist[0][2] == 1 and hist[-1][2] == 2


def test_shape_errors():
    with pytest.raises(ValueError, match="pair up"):
        consistency_filter(np.zeros((3, 4), np.float32), np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="k must"):
        consistency_filter(np.zeros((3, 4), np.float32), np.zeros((3, 4), np.float32), k=0)


@pytest.mark.parametrize("rule", [NegativeRule(), NegativeRule(duplicate_cosine=0.98), NegativeRule(margin=0.95),
                                  NegativeRule(margin=0.8, duplicate_cosine=0.9)])
def test_hard_negatives_match_a_naive_reference_and_exclude_likely_false_negatives(rule):
    rng = np.random.default_rng(7)
    q = unit(rng.normal(size=(200, 16)))
    d = unit(q + rng.normal(scale=0.35, size=q.shape))
    d[100:110] = unit(d[:10] + rng.normal(scale=0.02, size=(10, 16)))  # near copies of documents 0..9
    keys = [str(i % 150) for i in range(200)]  # pairs 150..199 repeat the documents of pairs 0..49
    res = consistency_filter(q, d, k=2, doc_keys=keys, negatives=3, depth=10, rule=rule)
    uniq_keys = list(dict.fromkeys(keys))
    first = [keys.index(u) for u in uniq_keys]
    scores = q @ d[first].T
    plain_rejected = {"near_positive": 0, "near_duplicate": 0}
    for i in range(len(q)):
        own_doc = uniq_keys.index(keys[i])
        own = scores[i, own_doc]
        searched = np.argsort(-scores[i], kind="stable")[:10]  # what a depth-10 search retrieves
        plain = [j for j in searched if j != own_doc and scores[i, j] < own][:3]
        near_positive = {j for j in plain if scores[i, j] >= own - (1 - rule.margin) * abs(own)}
        duplicate = {j for j in plain if rule.duplicate_cosine < 1
                     and d[first[j]] @ d[first[own_doc]] >= rule.duplicate_cosine} - near_positive
        plain_rejected["near_positive"] += len(near_positive)
        plain_rejected["near_duplicate"] += len(duplicate)
        expected = [first[j] for j in searched if j != own_doc and scores[i, j] < own - (1 - rule.margin) * abs(own)
                    and (rule.duplicate_cosine == 1 or d[first[j]] @ d[first[own_doc]] < rule.duplicate_cosine)][:3]
        assert res.negatives[i] == expected, i
        assert all(keys[j] != keys[i] for j in res.negatives[i])  # never a copy of its own document
    assert res.rejected == plain_rejected
    assert sum(map(len, res.negatives)) > 0.4 * len(q)
    if rule.duplicate_cosine < 1:  # the near copies are met, and kept out of each other's negatives
        assert not any(j in (100 + i, i) for i in range(10) for j in res.negatives[i] + res.negatives[100 + i])
    if rule == NegativeRule():  # the default: anything below the positive, as the plain rule
        assert res.rejected == {"near_positive": 0, "near_duplicate": 0}
        assert sum(map(len, res.negatives)) > 0.5 * 3 * len(q)
    else:
        assert sum(res.rejected.values()) > 0
    # A pair whose own document ranks second keeps the one above it out of its negatives.
    second = next(i for i in range(len(q)) if res.rank[i] == 2)
    above = first[int(np.argmax(scores[second]))]
    assert above not in res.negatives[second]


def test_a_near_copy_of_the_positive_is_no_negative_even_when_it_scores_well_below_it():
    def at(degrees):  # a unit vector in the x-y plane
        return np.array([np.cos(np.radians(degrees)), np.sin(np.radians(degrees)), 0.0], np.float32)

    # Pair 0's positive at 60 degrees from its query; a near copy of it at 68 (document cosine 0.990,
    # query score 0.37: far below 0.95 of 0.5); another document at 80 (cosine 0.94 with the positive).
    q = np.stack([at(0), at(68), at(80)])
    d = np.stack([at(60), at(68), at(80)])
    res = consistency_filter(q, d, k=1, negatives=2, rule=NegativeRule(duplicate_cosine=0.98))
    assert res.negatives[0] == [2]
    assert res.rejected["near_duplicate"] >= 1
    plain = consistency_filter(q, d, k=1, negatives=2, rule=NegativeRule(margin=1.0, duplicate_cosine=1.0))
    assert plain.negatives[0] == [1, 2]


@pytest.mark.parametrize("blocks", [(4096, 65536), (7, 13)])
def test_torch_search_gives_the_faiss_decisions(blocks):
    # The GPU fallback (torch top-k over blocks), forced on the CPU; small blocks exercise the
    # merge of running top-k lists across query and document blocks.
    rng = np.random.default_rng(3)
    q = unit(rng.normal(size=(300, 16)))
    d = unit(q + rng.normal(scale=0.4, size=q.shape))
    keys = [str(i % 260) for i in range(300)]
    faiss_res = consistency_filter(q, d, k=2, doc_keys=keys, negatives=3, search="faiss")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(consistency, "torch_search_top", functools.partial(consistency.torch_search_top,
                                                                       query_block=blocks[0], doc_block=blocks[1]))
        torch_res = consistency_filter(q, d, k=2, doc_keys=keys, negatives=3, search="torch")
    assert 0.2 < faiss_res.kept.mean() < 0.95
    np.testing.assert_array_equal(torch_res.kept, faiss_res.kept)
    np.testing.assert_array_equal(torch_res.rank, faiss_res.rank)
    assert torch_res.negatives == faiss_res.negatives
    scores, ids = consistency.search_top(q, d, 10, backend="faiss")
    t_scores, t_ids = consistency.search_top(q, d, 10, backend="torch", device="cpu")
    np.testing.assert_array_equal(t_ids, ids)
    np.testing.assert_allclose(t_scores, scores, rtol=1e-6)


def test_torch_search_keeps_ties_in_favour_of_the_pair():
    q = unit(np.array([[1.0, 0.0], [1.0, 0.0]]))
    d = unit(np.array([[1.0, 1.0], [1.0, -1.0]]))
    res = consistency_filter(q, d, k=1, search="torch")
    assert res.kept.tolist() == [True, True] and res.rank.tolist() == [1, 1]
