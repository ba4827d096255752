"""Stage 1 is a function of its inputs (issue 42): the same corpus, config and seed on the same
machine give the same tokens and byte-identical weights, whatever order the tokenizers trainer
meets the words in (huggingface/tokenizers#1794)."""

import hashlib
import json

import pytest
from builders import shared_data, stage1_config, tiny_bert, tiny_encoder
from transformers import AutoTokenizer

from mosaic_core.config import DistillConfig, VocabConfig
from mosaic_core.data.demo import make_demo
from mosaic_core.data.pubmed import Citation, iter_citations
from mosaic_core.modeling.refs import OFFLINE_MODEL
from mosaic_core.vocab.build import build_expanded_model
from mosaic_core.vocab.tokenizers import marked_characters, tokenizer_state, train_domain_tokenizer

OUTPUTS = ("model.safetensors", "tokenizer.json", "domain_token_ids.json")


def demo_texts(tmp_path) -> list[str]:
    """Titles and abstracts of the built-in demo's snapshot (about 1,900 texts)."""
    texts = []
    for name, data in sorted(make_demo(seed=0).files.items()):
        if name.endswith(".xml"):
            path = tmp_path / name.replace("/", "-")
            path.write_bytes(data)
            texts += [t for c in iter_citations(path) if isinstance(c, Citation)
                      for t in (c.title, " ".join(c.abstract_sections)) if t]
    return texts


def digests(out) -> dict[str, str]:
    return {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in OUTPUTS}


def tokens(out) -> list[str]:
    ids = json.loads((out / "domain_token_ids.json").read_text())
    return AutoTokenizer.from_pretrained(out).convert_ids_to_tokens(ids)


@pytest.mark.parametrize("family", ["bert", "roberta", "xlmr"])
def test_the_domain_tokenizer_is_the_same_every_time(tmp_path, family):
    base = AutoTokenizer.from_pretrained(tiny_encoder(tmp_path / "base", family))
    texts = demo_texts(tmp_path)[:600]
    states = [tokenizer_state(train_domain_tokenizer(base, texts, 1500, 2)) for _ in range(4)]
    assert all(s["model"]["vocab"] == states[0]["model"]["vocab"] for s in states) or family == "xlmr"
    if family == "xlmr":  # Unigram scores differ in their last bits (float sums in hash order): same pieces
        assert all({p for p, _ in s["model"]["vocab"]} == {p for p, _ in states[0]["model"]["vocab"]}
                   for s in states)
    if family == "bert":  # the marked characters are vocabulary entries again, not special tokens
        assert [t["content"] for t in states[0]["added_tokens"]] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        assert "##a" in states[0]["model"]["vocab"]


def test_marked_characters_are_those_the_trainer_would_add():
    wordpiece = {"model": {"type": "WordPiece"}}
    assert marked_characters(wordpiece, ["cab", "a", "bé"]) == ["##a", "##b", "##é"]
    assert marked_characters({"model": {"type": "BPE", "end_of_word_suffix": "</w>"}}, ["ab", "c"]) == [
        "b</w>", "c</w>"]
    assert marked_characters({"model": {"type": "Unigram"}}, ["ab"]) == []


def test_stage1_twice_on_the_demo_corpus_is_byte_identical(tmp_path):
    base = tiny_bert(tmp_path / "base")
    texts = demo_texts(tmp_path)
    cfg = stage1_config(base, vocab_size=1200, min_count=5, max_tokens=60, heldout_every=10, init="distill",
                        prune=0.3, prune_sentences=2,
                        distill=DistillConfig(batch_size=16, max_length=48, max_steps=4, eval_every=2, per_token=2,
                                              heldout_texts=16, lr=3e-3, precision="fp32"))
    a, b = tmp_path / "a", tmp_path / "b"
    report_a = build_expanded_model(texts, a, cfg)
    report_b = build_expanded_model(texts, b, cfg)
    assert report_a.tokens_added > 20 and report_a.pruned["dropped"] > 0  # a real selection, distilled, pruned
    assert tokens(a) == tokens(b)
    assert digests(a) == digests(b)
    recorded = json.loads((a / "vocab_report.json").read_text())
    assert recorded["seed"] == cfg.distill.seed and recorded["runtime"] == report_b.runtime
    assert recorded["runtime"]["torch_threads"] >= 1 and recorded["runtime"]["tokenizers"]


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_stage1_twice_on_the_real_biomedical_pairs_is_identical(tmp_path):
    """The default stage 1 (MiniLM, distilled, pruned) twice on the 9,852 real pairs."""
    texts = []
    with open(shared_data("biomed", "biomed_title_abstract.jsonl")) as fh:
        for line in fh:
            rec = json.loads(line)
            texts += [t for t in (rec["title"], rec["abstract"]) if t]
    cfg = VocabConfig(base_model=OFFLINE_MODEL)
    a, b = tmp_path / "a", tmp_path / "b"
    build_expanded_model(texts, a, cfg)
    build_expanded_model(texts, b, cfg)
    assert tokens(a) == tokens(b)
    assert digests(a) == digests(b)
