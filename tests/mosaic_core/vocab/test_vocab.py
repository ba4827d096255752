import json

import pytest
import torch
from builders import shared_data, stage1_config, tiny_bert, tiny_encoder
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer

from mosaic_core.modeling.refs import OFFLINE_MODEL, resolve_model
from mosaic_core.vocab.build import build_expanded_model
from mosaic_core.vocab.reduce import reduce_vocabulary
from mosaic_core.vocab.rows import expand_mlm_bias, mean_init_rows
from mosaic_core.vocab.tokenizers import BPESpec, UnsupportedTokenizer, WordPieceSpec, spec_of, tokenizer_state

CORPUS = [
    "The cardiomyopathy patient was treated with immunotherapy and cardiomyopathy improved.",
    "Cardiomyocytes and hepatocytes were cultured; cardiomyopathy in cardiomyocytes is common.",
    "Immunotherapy of hepatocytes, with immunotherapy again: hepatocytes were stained.",
    "Жидкость and жидкость were measured with the patient in cardiomyopathy.",
] * 20 + [f"{a}{b}cytes were seen" for a in "bdfgkv" for b in "aeiou"]  # a suffix shared by rare words


@pytest.fixture(scope="module")
def expanded(tmp_path_factory):
    base = tiny_bert(tmp_path_factory.mktemp("base"))
    out = tmp_path_factory.mktemp("expanded")
    report = build_expanded_model(CORPUS, out, stage1_config(base, vocab_size=400, heldout_every=10))
    return base, out, report


def test_old_rows_bit_identical_new_rows_mean_of_base_pieces(expanded):
    base, out, report = expanded
    old = AutoModel.from_pretrained(base).get_input_embeddings().weight
    new = AutoModel.from_pretrained(out).get_input_embeddings().weight
    assert torch.equal(new[: old.shape[0]], old)
    base_tok, new_tok = AutoTokenizer.from_pretrained(base), AutoTokenizer.from_pretrained(out)
    ids = json.loads((out / "domain_token_ids.json").read_text())
    assert ids == list(range(old.shape[0], old.shape[0] + report.tokens_added)) and ids
    checked = 0
    for token_id in ids:
        token = new_tok.convert_ids_to_tokens(token_id)
        if token.startswith("##"):
            # Inside a word: after "q" (a vocabulary word no longer entry extends), the base
            # tokenizer splits the rest exactly as it would mid-word.
            pieces = base_tok.tokenize("q" + token[2:])[1:]
        else:
            pieces = base_tok.tokenize(token)
        assert "[UNK]" not in pieces
        expected = old[base_tok.convert_tokens_to_ids(pieces)].mean(0)
        torch.testing.assert_close(new[token_id], expected, rtol=0, atol=1e-6)
        checked += 1
    assert checked == report.tokens_added


def test_unknown_only_tokens_are_not_added(expanded):
    _, out, report = expanded
    vocab = AutoTokenizer.from_pretrained(out).get_vocab()
    assert report.skipped_unknown > 0
    assert not any("ж" in t for t in vocab)


def test_continuation_token_is_used_mid_word(expanded):
    base, out, _ = expanded
    new_tok = AutoTokenizer.from_pretrained(out)
    ids = json.loads((out / "domain_token_ids.json").read_text())
    continuation = [t for t in new_tok.convert_ids_to_tokens(ids) if t.startswith("##") and len(t) > 4]
    assert continuation
    token = continuation[0]
    pieces = new_tok.tokenize("q" + token[2:])
    assert token in pieces[1:], pieces
    assert new_tok.tokenize("cardiomyopathy") == ["cardiomyopathy"]  # a whole domain word
    assert len(AutoTokenizer.from_pretrained(base).tokenize("cardiomyopathy")) > 1


def test_round_trip_and_unchanged_embeddings_without_new_tokens(expanded):
    base, out, _ = expanded
    st_base, st_new = SentenceTransformer(str(base), device="cpu"), SentenceTransformer(str(out), device="cpu")
    plain = ["the patient was with cells", "a cell is in the cells"]
    ids = AutoTokenizer.from_pretrained(out)(plain)["input_ids"]
    assert ids == AutoTokenizer.from_pretrained(base)(plain)["input_ids"]
    torch.testing.assert_close(st_new.encode(plain, convert_to_tensor=True),
                               st_base.encode(plain, convert_to_tensor=True), rtol=0, atol=0)
    assert st_new.encode(["cardiomyopathy"]).shape == (1, 32)


def test_checkpoint_mlm_head_grows_consistently(tmp_path):
    from transformers import AutoModelForMaskedLM

    base = tiny_bert(tmp_path / "base", mlm_head=True)
    out = tmp_path / "out"
    build_expanded_model(CORPUS, out, stage1_config(base, vocab_size=400, heldout_every=10))
    old, new = AutoModelForMaskedLM.from_pretrained(base), AutoModelForMaskedLM.from_pretrained(out)
    v = old.config.vocab_size
    old_bias, new_bias = old.cls.predictions.bias, new.cls.predictions.bias
    assert torch.equal(new_bias[:v], old_bias)
    assert new.get_output_embeddings().weight is new.get_input_embeddings().weight  # still tied
    base_tok, new_tok = AutoTokenizer.from_pretrained(base), AutoTokenizer.from_pretrained(out)
    for token_id in json.loads((out / "domain_token_ids.json").read_text()):
        token = new_tok.convert_ids_to_tokens(token_id)
        pieces = base_tok.tokenize("q" + token[2:])[1:] if token.startswith("##") else base_tok.tokenize(token)
        expected = old_bias[base_tok.convert_tokens_to_ids(pieces)].mean()
        torch.testing.assert_close(new_bias[token_id], expected, rtol=0, atol=1e-6)
    assert new_bias.shape[0] == new.get_input_embeddings().weight.shape[0] > v
    assert SentenceTransformer(str(out), device="cpu").encode(["cardiomyopathy"]).shape == (1, 32)
    torch.testing.assert_close(AutoModel.from_pretrained(out).get_input_embeddings().weight[:v],
                               old.get_input_embeddings().weight, rtol=0, atol=0)


def test_report_numbers(expanded):
    _, out, report = expanded
    assert report.tokens_added > 0
    assert report.fertility_after < report.fertility_before
    assert report.single_token_share_after > report.single_token_share_before
    assert json.loads((out / "vocab_report.json").read_text())["tokens_added"] == report.tokens_added
    assert "tokens added" in (out / "vocab_report.md").read_text()


def test_wordpiece_split():
    spec = WordPieceSpec({"un": 0, "##aff": 1, "##able": 2, "##un": 3, "a": 4}, "##", "[UNK]", 100)
    assert spec.split("unaffable") == ["un", "##aff", "##able"]
    assert spec.split("unaffable", continuation=True) == ["##un", "##aff", "##able"]
    assert spec.split("aff", continuation=False) is None  # "aff" exists only as "##aff"
    assert spec.base_pieces("##unaff") == ["##un", "##aff"]
    assert spec.split("xyz") is None


def test_mean_init_and_bias_growth():
    w = torch.arange(12, dtype=torch.float32).view(4, 3)
    assert torch.equal(mean_init_rows(w, [[0, 2], [3]]), torch.tensor([[3.0, 4, 5], [9, 10, 11]]))
    bias = torch.tensor([1.0, 2, 3, 4])
    assert torch.equal(expand_mlm_bias(bias, [[0, 1], [3]]), torch.tensor([1.0, 2, 3, 4, 1.5, 4]))


def test_unsupported_tokenizer_kind_is_a_clear_error(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, "<unk>")))
    with pytest.raises(UnsupportedTokenizer, match="WordPiece, BPE, Unigram.*WordLevel"):
        spec_of(tokenizer_state(tok))


# --- BPE (RoBERTa family) and Unigram (XLM-R family) --------------------------------------

OTHER_CORPUS = [
    "The cardiomyopathy patient was treated with immunotherapy; cardiomyopathy improved with immunotherapy.",
    "Cardiomyocytes and hepatocytes were cultured; hepatocytes in cardiomyopathy were stained.",
    "Жидкость and жидкость were measured in the immunotherapy of hepatocytes.",
] * 20
PROBES = ["the patient was with cells", "a cell is in the cells", "cardiomyopathy", "the immunotherapy",
          "hepatocytes cardiomyocytes", "precardiomyopathic immunotherapeutic", "myopathy therapy", "Жидкость",
          "cells with cardiomyopathy were in the hepatocytes of a patient", "zzz qqq 123"]


@pytest.fixture(scope="module", params=["roberta", "xlmr"])
def other_family(request, tmp_path_factory):
    base = tiny_encoder(tmp_path_factory.mktemp(request.param), request.param, mlm_head=True)
    out = tmp_path_factory.mktemp(f"{request.param}-expanded")
    report = build_expanded_model(OTHER_CORPUS, out, stage1_config(base, vocab_size=400, heldout_every=10))
    return request.param, base, out, report


def test_other_families_rows_and_pieces(other_family):
    family, base, out, report = other_family
    assert report.kind == {"roberta": "BPE", "xlmr": "Unigram"}[family]
    assert report.tokens_added > 0
    old = AutoModel.from_pretrained(base).get_input_embeddings().weight
    new = AutoModel.from_pretrained(out).get_input_embeddings().weight
    assert torch.equal(new[: old.shape[0]], old)
    base_tok, new_tok = AutoTokenizer.from_pretrained(base), AutoTokenizer.from_pretrained(out)
    ids = json.loads((out / "domain_token_ids.json").read_text())
    assert ids == list(range(old.shape[0], old.shape[0] + report.tokens_added))
    unk = base_tok.unk_token_id
    for token_id in ids:
        token = new_tok.convert_ids_to_tokens(token_id)
        found = base_tok.backend_tokenizer.model.tokenize(token)  # the base algorithm's own split
        assert len(found) > 1 and all(t.id != unk for t in found)
        expected = old[[t.id for t in found]].mean(0)
        torch.testing.assert_close(new[token_id], expected, rtol=0, atol=1e-6)
    assert new.shape[0] == old.shape[0] + report.tokens_added


def test_other_families_use_new_tokens_and_only_coarsen(other_family):
    family, base, out, report = other_family
    base_tok, new_tok = AutoTokenizer.from_pretrained(base), AutoTokenizer.from_pretrained(out)
    first = report.first_new_id
    word = {"roberta": "Ġimmunotherapy", "xlmr": "▁immunotherapy"}[family]
    assert word in new_tok.get_vocab()
    assert new_tok.tokenize("the immunotherapy")[-1] == word
    assert len(base_tok.tokenize("the immunotherapy")) > 4
    assert not any("ж" in t.lower() for t in new_tok.get_vocab())  # UNK-only for the base: never added
    used_new = 0
    for text in PROBES + OTHER_CORPUS[:3]:
        old_ids, new_ids = base_tok(text)["input_ids"], new_tok(text)["input_ids"]
        if all(i < first for i in new_ids):
            assert new_ids == old_ids, text  # no new token: exactly the base tokenization
        else:
            used_new += 1
            assert len(new_ids) < len(old_ids)
        assert new_tok.decode(new_ids, skip_special_tokens=True) == base_tok.decode(old_ids, skip_special_tokens=True)
    assert used_new >= 4


def test_other_families_round_trip_and_mlm_bias(other_family):
    from transformers import AutoModelForMaskedLM

    from mosaic_core.modeling.dual_encoder import build_model

    _, base, out, report = other_family
    st_base, st_new = SentenceTransformer(str(base), device="cpu"), SentenceTransformer(str(out), device="cpu")
    plain = [t for t in PROBES if max(st_new.tokenizer(t)["input_ids"]) < report.first_new_id]
    assert plain  # texts that hold no new token embed exactly as before
    torch.testing.assert_close(st_new.encode(plain, convert_to_tensor=True),
                               st_base.encode(plain, convert_to_tensor=True), rtol=0, atol=0)
    old, new = AutoModelForMaskedLM.from_pretrained(base), AutoModelForMaskedLM.from_pretrained(out)
    v = old.config.vocab_size
    assert torch.equal(new.lm_head.bias[:v], old.lm_head.bias)
    assert new.lm_head.bias.shape[0] == v + report.tokens_added
    assert new.get_output_embeddings().weight is new.get_input_embeddings().weight
    model, from_checkpoint = build_model(str(out))  # stage 2 takes the grown head as is
    assert from_checkpoint and model.head.bias.shape[0] == v + report.tokens_added


def test_bpe_merge_chains():
    from tokenizers import Tokenizer, models

    state = json.loads(Tokenizer(models.BPE({"a": 0, "b": 1, "c": 2, "ab": 3}, [("a", "b")])).to_str())
    spec = BPESpec.from_state(state)
    assert spec.base_pieces("abc") == ["ab", "c"]
    entries = spec.insert(state["model"], {"abc": ["ab", "c"], "cab": ["c", "ab"], "cabc": ["c", "ab", "c"]}, 4, {})
    # "cabc": the merges so far give c + abc; one more merge joins them.
    assert entries == {"abc": ["ab", "c"], "cab": ["c", "ab"], "cabc": ["c", "ab", "c"]}
    assert state["model"]["merges"][1:] == [["ab", "c"], ["c", "ab"], ["c", "abc"]]
    model = Tokenizer.from_str(json.dumps(state)).model
    for word in entries:
        assert [t.value for t in model.tokenize(word)] == [word]
    # Both chains for a + b + c pass through a base token ("ab", "bc"): left out.
    state = json.loads(Tokenizer(models.BPE({"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4}, [])).to_str())
    spec = BPESpec.from_state(state)
    assert spec.base_pieces("abc") == ["a", "b", "c"] and spec.base_pieces("abz") is None  # z: not renderable
    assert spec.insert(state["model"], {"abc": ["a", "b", "c"]}, 5, {}) == {}


@pytest.mark.parametrize("family", ["bert", "roberta", "xlmr"])
def test_reduce_to_corpus_keeps_used_rows_bit_identical(tmp_path, family):
    base = tiny_encoder(tmp_path / "base", family)
    corpus = ["the cells were in a cell", "a cell was with the cells"]
    out = tmp_path / "reduced"
    report = reduce_vocabulary(str(base), corpus, out)
    base_tok, new_tok = AutoTokenizer.from_pretrained(base), AutoTokenizer.from_pretrained(out)
    old_model, new_model = AutoModel.from_pretrained(base), AutoModel.from_pretrained(out)
    old, new = old_model.get_input_embeddings().weight, new_model.get_input_embeddings().weight
    assert report.rows_before == old.shape[0] > report.rows_after == new.shape[0] == len(new_tok)
    assert report.parameters_after == sum(p.numel() for p in new_model.parameters()) < report.parameters_before
    for token, new_id in new_tok.get_vocab().items():  # every kept row is the old row of that token
        assert torch.equal(new[new_id], old[base_tok.convert_tokens_to_ids(token)]), token
    assert not any("patient" in t or "ient" in t for t in new_tok.get_vocab())  # unused by the corpus
    old_params = {k: v for k, v in old_model.state_dict().items() if "word_embeddings" not in k}
    for key, value in old_params.items():  # the encoder is untouched
        assert torch.equal(new_model.state_dict()[key], value), key
    st_base, st_new = SentenceTransformer(str(base), device="cpu"), SentenceTransformer(str(out), device="cpu")
    assert [base_tok.convert_ids_to_tokens(i) for i in base_tok(corpus)["input_ids"]] == \
        [new_tok.convert_ids_to_tokens(i) for i in new_tok(corpus)["input_ids"]]
    torch.testing.assert_close(st_new.encode(corpus, convert_to_tensor=True),
                               st_base.encode(corpus, convert_to_tensor=True), rtol=0, atol=0)
    assert new_tok.unk_token not in new_tok.tokenize("zebra quiz")  # single characters kept


def test_reduce_then_expand(tmp_path):
    base = tiny_encoder(tmp_path / "base", "bert")
    out = tmp_path / "out"
    report = build_expanded_model(CORPUS, out, stage1_config(base, vocab_size=400, heldout_every=10),
                                  reduce_texts=CORPUS)
    assert report.reduction["rows_after"] < report.reduction["rows_before"]
    assert report.first_new_id == report.reduction["rows_after"]
    assert "fewer" in (out / "vocab_report.md").read_text()
    assert not list(out.glob(".reduced-*"))
    assert SentenceTransformer(str(out), device="cpu").tokenizer.tokenize("cardiomyopathy") == ["cardiomyopathy"]


def test_real_biomedical_corpus_with_offline_model(tmp_path):
    from mosaic_core.config import VocabConfig

    path = shared_data("biomed", "biomed_title_abstract.jsonl")
    texts = []
    with open(path) as fh:
        for _, line in zip(range(1500), fh, strict=False):
            rec = json.loads(line)
            texts += [rec["title"] or "", rec["abstract"] or ""]
    cfg = VocabConfig(base_model=OFFLINE_MODEL, init="mean", prune=0.0)  # the selection alone
    report = build_expanded_model(texts, tmp_path / "a", cfg)
    assert 100 < report.tokens_added < report.candidates / 4  # frequent words, not fragments
    assert report.fertility_after < 0.9 * report.fertility_before
    rows = report.thresholds  # more uses demanded: fewer tokens, higher fertility
    assert [r["tokens"] for r in rows] == sorted((r["tokens"] for r in rows), reverse=True)
    assert [r["fertility"] for r in rows] == sorted(r["fertility"] for r in rows)
    assert next(r for r in rows if r["min_count"] == cfg.min_count)["tokens"] == report.tokens_added
    again = build_expanded_model(texts, tmp_path / "b", cfg)  # the domain trainer breaks ties at random
    assert (tmp_path / "a" / "tokenizer.json").read_text() == (tmp_path / "b" / "tokenizer.json").read_text()
    assert again.tokens_added == report.tokens_added
    base = SentenceTransformer(resolve_model(OFFLINE_MODEL), device="cpu")
    new = SentenceTransformer(str(tmp_path / "a"), device="cpu")
    plain = ["the patient was treated at home", "results of the study"]
    assert new.tokenizer(plain)["input_ids"] == base.tokenizer(plain)["input_ids"]
    torch.testing.assert_close(new.encode(plain, convert_to_tensor=True), base.encode(plain, convert_to_tensor=True),
                               rtol=0, atol=0)
