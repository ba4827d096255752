"""Documents → passages → pairs without a model: sentence-aware chunking, the title, inverse-cloze
and cropping builders' invariants, their counts, and determinism whatever the order or batching."""

import random

import pytest
from pydantic import ValidationError

from mosaic_core.config_documents import DocumentsConfig
from mosaic_core.data.documents import (
    BuildStats,
    Passage,
    chunk,
    crop_bounds,
    document_pairs,
    split_sentences,
)

WORDS = ("notice termination party clause payment invoice agreement breach remedy court damages lease tenant "
         "landlord deposit liability warranty indemnity").split()


def sentence(rng, n):
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def corpus(n_docs=30, seed=1):
    """Documents of 1 to 40 distinct sentences (3-25 words each), a third without a title."""
    rng = random.Random(seed)
    docs = []
    for d in range(n_docs):
        sentences = []
        for s in range(rng.randint(1, 40)):
            sentences.append(sentence(rng, rng.randint(2, 24)).removesuffix(".") + f" s{d}x{s}.")
        docs.append((f"doc{d}", None if d % 3 == 0 else f"Title of document {d}", " ".join(sentences)))
    return docs


def build(docs, cfg):
    stats = BuildStats()
    out = {}
    for doc in docs:
        passages, pairs = document_pairs(doc, cfg, stats)
        out[doc[0]] = (passages, pairs)
    return out, stats


def test_sentences_end_at_punctuation_but_not_before_a_lower_case_word():
    text = 'First one, as Smith et al. found. "Second?" she asked!\nStill the second line... Third\n\nNew paragraph'
    assert split_sentences(text) == ["First one, as Smith et al. found.", '"Second?" she asked!',
                                     "Still the second line...", "Third", "New paragraph"]


def test_chunks_pack_whole_sentences_up_to_the_size():
    sentences = [f"W{i} " * 4 + f"end{i}." for i in range(10)]  # 5 words each
    passages, dropped = chunk(" ".join(sentences), passage_words=12, min_passage_words=1)
    assert [len(p) for p in passages] == [2] * 5 and dropped == 0  # 10 words each: a third would make 15
    assert [s for p in passages for s in p] == sentences  # nothing cut, nothing lost, in order
    passages, _ = chunk(" ".join(sentences[:9]), passage_words=12, min_passage_words=6)
    assert [len(p) for p in passages] == [2, 2, 2, 3]  # the last sentence (5 words) joined the passage before it
    assert [s for p in passages for s in p] == sentences[:9]


def test_a_long_sentence_is_cut_between_words_and_a_short_tail_joins_its_neighbour():
    long = " ".join(f"w{i}" for i in range(25)) + "."
    passages, dropped = chunk(long + " Short tail here.", passage_words=10, min_passage_words=4)
    assert [sum(len(s.split()) for s in p) for p in passages] == [10, 10, 8]  # 5 + 3 words joined
    assert " ".join(" ".join(p) for p in passages) == long + " Short tail here."
    assert chunk("Too short to keep.", passage_words=10, min_passage_words=5) == ([], 1)


def test_title_pairs_the_first_or_each_passage_and_counts_documents_without_one():
    text = " ".join(f"Sentence number {i} of the document." for i in range(12))  # 72 words
    cfg = DocumentsConfig(path="x", builders=("title",), passage_words=30, min_passage_words=5)
    passages, pairs = document_pairs(("a", "  A  title ", text), cfg, stats := BuildStats())
    assert len(passages) == 3 and pairs == [("A title", passages[0].text, "title", "a", None)]
    _, pairs = document_pairs(("a", "A title", text), cfg.model_copy(update={"title_passages": "each"}), stats)
    assert [p.document for p in pairs] == [p.text for p in passages]
    assert document_pairs(("b", None, text), cfg, stats)[1] == []
    assert stats.made == {"title": 4} and stats.skipped["title"] == {"no_title": 1}


def test_inverse_cloze_takes_a_sentence_out_of_its_passage_unless_kept():
    cfg = DocumentsConfig(path="x", builders=("ict",), passage_words=60, min_passage_words=5, pairs_per_passage=2)
    out, stats = build(corpus(60), cfg)
    kept = total = 0
    for passages, pairs in out.values():
        by_text = {p.text: p for p in passages}
        for pair in pairs:
            assert pair.builder == "ict"
            owner = next(p for p in passages if pair.query in p.sentences)  # the query is one of its sentences
            assert len(pair.query.split()) >= 3
            if pair.document == owner.text:
                kept += 1
            else:
                assert pair.query not in pair.document
                assert pair.document == " ".join(s for s in owner.sentences if s != pair.query)
                assert pair.document not in by_text
            total += 1
        for p in passages:  # distinct sentences per passage, as many as asked where there are
            queries = [q.query for q in pairs if q.query in p.sentences]
            assert len(queries) == len(set(queries)) == (0 if len(p.sentences) < 2 else 2)
    assert total == stats.made["ict"] > 300
    assert 0.04 < kept / total < 0.18  # ict_keep_probability 0.1
    assert stats.skipped["ict"]["one_sentence"] > 0
    assert stats.passages == sum(len(p) for p, _ in out.values())


def test_inverse_cloze_skips_a_passage_of_one_sentence_or_none_long_enough():
    cfg = DocumentsConfig(path="x", builders=("ict",), passage_words=50, min_passage_words=2)
    stats = BuildStats()
    assert document_pairs(("a", None, "Only one sentence here in this passage."), cfg, stats)[1] == []
    assert document_pairs(("b", None, "Too short. Also short. Tiny one."), cfg, stats)[1] == []
    assert stats.skipped["ict"] == {"one_sentence": 1, "short_sentences": 1} and stats.made["ict"] == 0


def test_crops_are_two_contiguous_spans_of_the_passage_within_the_ratios():
    cfg = DocumentsConfig(path="x", builders=("crop",), passage_words=80, min_passage_words=10, pairs_per_passage=3,
                          crop_min_ratio=0.2, crop_max_ratio=0.4)
    out, stats = build(corpus(40), cfg)
    lengths = set()
    for passages, pairs in out.values():
        assert len(pairs) + 0 <= 3 * len(passages)
        for pair in pairs:
            words = next(p for p in passages if f" {pair.query} " in f" {p.text} ").text.split()
            low, high = crop_bounds(len(words), 0.2, 0.4)
            for span in (pair.query, pair.document):
                n = len(span.split())
                assert low <= n <= high and 0.2 * len(words) <= n <= max(0.4 * len(words), low)
                assert any(words[i:i + n] == span.split() for i in range(len(words) - n + 1))  # contiguous
                lengths.add(n / len(words))
            assert pair.query != pair.document
    assert stats.made["crop"] == sum(len(p) for _, p in out.values()) == 3 * stats.passages - sum(
        stats.skipped["crop"].values())
    assert min(lengths) < 0.25 and max(lengths) > 0.35  # the whole range is drawn


def test_pairs_depend_on_the_document_and_seed_only_not_on_order_batching_or_other_builders():
    docs = corpus(25)
    cfg = DocumentsConfig(path="x", builders=("title", "ict", "crop"), passage_words=40, min_passage_words=5)
    first, stats = build(docs, cfg)
    again, _ = build(docs, cfg)
    shuffled = docs[:]
    random.Random(3).shuffle(shuffled)
    batches = [build(shuffled[i:i + 4], cfg)[0] for i in range(0, len(shuffled), 4)]  # other batch boundaries
    merged = {k: v for b in batches for k, v in b.items()}
    assert first == again == merged
    alone, _ = build(docs, cfg.model_copy(update={"builders": ("ict",)}))
    assert {k: [p for p in v[1] if p.builder == "ict"] for k, v in first.items()} == {k: v[1] for k, v in alone.items()}
    other, _ = build(docs, cfg.model_copy(update={"seed": 1}))
    assert other != first
    assert stats.made == {b: sum(p.builder == b for _, ps in first.values() for p in ps) for b in ("title", "ict",
                                                                                                      "crop")}
    assert stats.made["title"] == sum(1 for d in docs if d[1] is not None and first[d[0]][0])


def test_passages_carry_their_document_and_index():
    cfg = DocumentsConfig(path="x", passage_words=10, min_passage_words=2)
    passages, _ = document_pairs(("d", "T", "One two three four five. Six seven eight nine ten. Eleven twelve."),
                                 cfg, BuildStats())
    assert passages == [Passage("d", 0, "T", ("One two three four five.", "Six seven eight nine ten.")),
                        Passage("d", 1, "T", ("Eleven twelve.",))]


@pytest.mark.parametrize(("fields", "message"), [
    ({"builders": ("generated",)}, "builders has 'generated' but no generator is set"),
    ({"generator": "doc2query/msmarco-t5-base-v1"}, "generator 'doc2query/msmarco-t5-base-v1' is set but builders"),
    ({"cross_encoder": "ce"}, "cross_encoder scores generated queries only"),
    ({"builders": ("generated",), "generator": "g", "min_cross_encoder_score": 0.5}, "min_cross_encoder_score needs"),
    ({"crop_min_ratio": 0.6}, "crop_min_ratio 0.6 is above crop_max_ratio 0.5"),
    ({"min_passage_words": 300}, "min_passage_words 300 is above passage_words 200"),
    ({"builders": ("ict", "ict")}, "names a builder twice"),
    ({"builders": ("cloze",)}, "Input should be 'title', 'ict', 'crop' or 'generated'"),
    ({"builders": ()}, "at least 1 item"),
    ({"ict_keep_probability": 1.5}, "less than or equal to 1"),
    ({"passage_words": True}, "must be a number, not the boolean True"),
])
def test_config_errors_say_what_to_change(fields, message):
    with pytest.raises(ValidationError, match=message):
        DocumentsConfig(path="docs", **fields)


def test_config_defaults():
    cfg = DocumentsConfig(path="docs")
    assert cfg.builders == ("title", "ict") and cfg.ict_keep_probability == 0.1
    assert (cfg.crop_min_ratio, cfg.crop_max_ratio, cfg.passage_words, cfg.queries_per_passage) == (0.1, 0.5, 200, 3)
    generated = DocumentsConfig(path="docs", builders=("generated",), generator="g", cross_encoder="c",
                                min_cross_encoder_score=0.0)
    assert generated.generator == "g" and generated.config_hash() != cfg.config_hash()


def test_chunking_a_corpus_keeps_every_sentence_in_order_within_the_size():
    for doc_id, _, text in corpus(40):
        passages, dropped = chunk(text, passage_words=50, min_passage_words=8)
        words = [sum(len(s.split()) for s in p) for p in passages]
        if passages:
            assert [s for p in passages for s in p] == split_sentences(text) and dropped == 0, doc_id
            assert all(8 <= n < 50 + 8 for n in words) and all(n <= 50 for n in words[:-1]), doc_id
        else:
            assert dropped == 1 and len(text.split()) < 8
