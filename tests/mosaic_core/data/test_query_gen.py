"""Generated queries on a tiny random T5 and scores from a tiny random BERT cross-encoder, both built
with a word-level tokenizer at test time: counts, shapes, reproducibility, the min-score filter."""

import pytest
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import (
    AutoModelForSequenceClassification,
    BertConfig,
    PreTrainedTokenizerFast,
    T5Config,
    T5ForConditionalGeneration,
)

from mosaic_core.config_documents import DocumentsConfig
from mosaic_core.data import query_gen
from mosaic_core.data.documents import BuildStats, Passage
from mosaic_core.data.query_gen import (
    generate_queries,
    generated_pairs,
    load_cross_encoder,
    UnusableModel,
    load_generator,
    score_pairs,
)
from mosaic_core.modeling.refs import resolve_model

TEXT = ("the tenant pays the deposit before the lease starts and the landlord keeps it in a separate account "
        "until the lease ends when either party may give notice of termination in writing")
WORDS = sorted(set(TEXT.split()))


def tokenizer(specials: list[str], pair_template: bool) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(specials + WORDS)}, unk_token=specials[-1]))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if pair_template:  # BERT's [CLS] a [SEP] b [SEP]
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
        return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", cls_token="[CLS]",
                                       sep_token="[SEP]", unk_token="[UNK]")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    t5_tok = tokenizer(["<pad>", "</s>", "<unk>"], pair_template=False)
    t5 = T5ForConditionalGeneration(T5Config(
        vocab_size=len(t5_tok), d_model=16, d_ff=32, d_kv=8, num_heads=2, num_layers=1, num_decoder_layers=1,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))
    t5.save_pretrained(root / "t5")
    t5_tok.save_pretrained(root / "t5")
    bert_tok = tokenizer(["[PAD]", "[CLS]", "[SEP]", "[UNK]"], pair_template=True)
    for labels in (1, 2):
        bert = AutoModelForSequenceClassification.from_config(BertConfig(
            vocab_size=len(bert_tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=128, num_labels=labels))
        bert.save_pretrained(root / f"ce{labels}")
        bert_tok.save_pretrained(root / f"ce{labels}")
    return root


def passages(n=7):
    words = TEXT.split()
    return [Passage(f"doc{i}", i % 2, None, (" ".join(words[i:i + 12]) + ".",)) for i in range(n)]


def config(models_dir, **kw):
    return DocumentsConfig(path="docs", builders=("generated",), generator=str(models_dir / "t5"),
                           generator_max_new_tokens=6, batch_size=3, **kw)


def test_sampled_queries_are_reproducible_and_leave_the_callers_rng_alone(models_dir):
    gen = load_generator(str(models_dir / "t5"))
    texts = [p.text for p in passages(4)]
    state = torch.get_rng_state()
    first = generate_queries(gen, texts, n=3, seed=11, max_new_tokens=6)
    assert torch.equal(torch.get_rng_state(), state)
    assert len(first) == 4 and all(len(qs) == 3 for qs in first)
    assert all(isinstance(q, str) and len(q.split()) <= 6 and set(q.split()) <= set(WORDS) for qs in first for q in qs)
    assert generate_queries(gen, texts, n=3, seed=11, max_new_tokens=6) == first
    assert generate_queries(gen, texts, n=3, seed=12, max_new_tokens=6) != first
    assert generate_queries(gen, [], n=3, seed=11) == []


def test_generated_pairs_count_per_passage_without_empty_or_repeated_queries(models_dir):
    cfg = config(models_dir)
    gen = load_generator(resolve_model(cfg.generator))  # how a caller resolves a config's reference
    stats = BuildStats()
    pairs = list(generated_pairs(passages(), cfg, gen, stats, progress=False))
    assert stats.made["generated"] == len(pairs) > 0
    assert len(pairs) + sum(stats.skipped["generated"].values()) == 7 * cfg.queries_per_passage
    by_passage = {}
    for pair in pairs:
        assert pair.builder == "generated" and pair.query and pair.score is None
        by_passage.setdefault((pair.doc_id, pair.document), []).append(pair.query.casefold())
    assert set(by_passage) <= {(p.doc_id, p.text) for p in passages()}
    assert all(len(qs) == len(set(qs)) <= 3 for qs in by_passage.values())
    assert list(generated_pairs(passages(), cfg, gen, BuildStats(), progress=False)) == pairs  # reproducible


def test_empty_and_repeated_queries_are_dropped_and_counted(models_dir, monkeypatch):
    cfg = config(models_dir)
    monkeypatch.setattr(query_gen, "generate_queries", lambda g, texts, n, seed, m: [["a b", "A B", "", "c"]
                                                                                      for _ in texts])
    stats = BuildStats()
    pairs = list(generated_pairs(passages(2), cfg, load_generator(cfg.generator), stats, progress=False))
    assert [(p.query, p.doc_id) for p in pairs] == [("a b", "doc0"), ("c", "doc0"), ("a b", "doc1"), ("c", "doc1")]
    assert stats.skipped["generated"] == {"duplicate": 2, "empty": 2} and stats.made["generated"] == 4


def test_the_cross_encoder_scores_each_pair_and_the_minimum_filters(models_dir):
    ce = load_cross_encoder(str(models_dir / "ce1"))
    queries, documents = ["tenant deposit", "lease notice", "landlord"], [p.text for p in passages(3)]
    scores = score_pairs(ce, queries, documents, batch_size=2)
    assert len(scores) == 3 and all(isinstance(s, float) for s in scores) and len(set(scores)) == 3
    alone = [score_pairs(ce, [q], [d])[0] for q, d in zip(queries, documents, strict=True)]
    assert alone == pytest.approx(scores, abs=1e-5)  # padding in a batch changes nothing

    cfg = config(models_dir, cross_encoder=str(models_dir / "ce1"))
    gen = load_generator(cfg.generator)
    scored = list(generated_pairs(passages(), cfg, gen, BuildStats(), cross_encoder=ce, progress=False))
    assert all(isinstance(p.score, float) for p in scored)
    assert [p.score for p in scored] == pytest.approx(score_pairs(ce, [p.query for p in scored],
                                                                  [p.document for p in scored]), abs=1e-5)
    threshold = sorted(p.score for p in scored)[len(scored) // 2]
    stats = BuildStats()
    kept = list(generated_pairs(passages(), cfg.model_copy(update={"min_cross_encoder_score": threshold}), gen,
                                stats, cross_encoder=ce, progress=False))
    assert kept == [p for p in scored if p.score >= threshold] and 0 < len(kept) < len(scored)
    assert stats.skipped["generated"]["low_score"] == len(scored) - len(kept) == stats.skipped["generated"][
        "low_score"]
    assert stats.made["generated"] == len(kept)


def test_models_that_cannot_serve_are_errors_saying_what_to_pass(models_dir, tmp_path):
    with pytest.raises(UnusableModel, match="cross_encoder .*ce2' has 2 labels"):
        load_cross_encoder(str(models_dir / "ce2"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UnusableModel, match="generator .*empty' cannot be loaded .*pass a local model folder"):
        load_generator(str(tmp_path / "empty"))


def test_a_cross_encoder_of_other_than_one_label_is_refused_from_its_config_alone(models_dir, tmp_path):
    from mosaic_core.modeling.refs import ModelNotFound, check_cross_encoder

    assert check_cross_encoder(str(models_dir / "ce1"), "teacher") == str(models_dir / "ce1")
    (tmp_path / "config-only").mkdir()
    (tmp_path / "config-only" / "config.json").write_text((models_dir / "ce2" / "config.json").read_text())
    with pytest.raises(ModelNotFound, match="teacher .*config-only: a model of 2 labels"):
        check_cross_encoder(str(tmp_path / "config-only"), "teacher")  # no weights read
    with pytest.raises(ModelNotFound, match="not a model"):
        check_cross_encoder(str(tmp_path), "teacher")
