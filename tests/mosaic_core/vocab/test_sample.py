"""Stage 1's corpus sample (mosaic_core.vocab.sample): bounded, deterministic, stable as a corpus grows."""

import hashlib

import pytest

from mosaic_core.vocab.sample import bottom_k

TEXTS = [f"text number {i} about topic {i % 7}" for i in range(500)]


def _hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def test_a_corpus_no_larger_than_the_sample_is_used_whole_in_its_order():
    sample = bottom_k(iter(TEXTS[:40]), 40)
    assert sample.texts == TEXTS[:40] and sample.corpus_texts == 40 and sample.whole
    assert bottom_k(iter(TEXTS[:40]), 1000).texts == TEXTS[:40]


def test_the_sample_is_the_k_smallest_hashes_in_corpus_order():
    sample = bottom_k(iter(TEXTS), 50)
    expected = sorted(TEXTS, key=_hash)[:50]
    assert set(sample.texts) == set(expected) and len(sample.texts) == 50
    assert sample.texts == [t for t in TEXTS if t in set(expected)]  # the corpus's order
    assert sample.corpus_texts == 500 and not sample.whole
    assert bottom_k(reversed(TEXTS), 50).texts == sample.texts[::-1]  # content decides, not position


def test_a_grown_corpus_keeps_every_sampled_text_a_newcomer_does_not_outrank():
    before = set(bottom_k(iter(TEXTS[:300]), 50).texts)
    after = bottom_k(iter(TEXTS), 50)
    newcomers = set(after.texts) - before
    assert newcomers <= set(TEXTS[300:])
    assert len(before - set(after.texts)) == len(newcomers)  # each newcomer displaced exactly one text


def test_duplicates_and_ties_are_deterministic_and_the_size_must_be_positive():
    texts = ["same"] * 10 + ["other"]
    assert bottom_k(iter(texts), 3).texts == bottom_k(iter(texts), 3).texts
    assert len(bottom_k(iter(texts), 3).texts) == 3
    with pytest.raises(ValueError, match="k > 0"):
        bottom_k(iter(texts), 0)
