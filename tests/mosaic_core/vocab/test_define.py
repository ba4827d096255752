"""Stage 1 with a glossary: its one-word terms are tokens on evidence of their own, never pruned,
their rows learnt from their definitions."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from builders import stage1_config, tiny_bert, tiny_encoder
from transformers import AutoModel, AutoTokenizer

from mosaic_core.config import DistillConfig
from mosaic_core.data.glossary import GlossaryEntry
from mosaic_core.vocab.build import build_expanded_model
from mosaic_core.vocab.define import (
    GlossaryTerms,
    RowBudget,
    _defined,
    definition_windows,
    glossary_candidates,
    steps_for_updates,
    word_form,
)
from mosaic_core.vocab.tokenizers import spec_of, tokenizer_state

ZORVATIDE = GlossaryEntry("Zorvatide", "a drug that blocks calcium channels in the heart", ("ZRV-1",))
KELTRASE = GlossaryEntry("keltrase", "an enzyme that breaks down collagen in the skin")
CORPUS = (["The patient was given zorvatide and the cells were stained."] * 3
          + ["Keltrase in the cells of the patient was measured."] * 2
          + ["The patient and the cells of the patient were seen in a trial with cardiomyopathy."] * 60)


@pytest.mark.parametrize("family", ["bert", "roberta", "xlmr"])
def test_one_word_names_the_base_splits_are_candidates(tmp_path, family):
    tok = AutoTokenizer.from_pretrained(tiny_encoder(tmp_path / family, family))
    spec = spec_of(tokenizer_state(tok))
    words = word_form(tok)
    found = glossary_candidates(spec, tok, GlossaryTerms((ZORVATIDE, KELTRASE)))
    keltrase = words("keltrase")[0]
    assert keltrase in found and found[keltrase][1] is KELTRASE
    assert len(found[keltrase][0]) > 1 and "".join(found[keltrase][0]).replace("##", "") == keltrase
    assert all(e.term != "ZRV-1" for _, e in found.values())  # several words for every pre-tokenizer


def test_glossary_terms_are_added_on_their_own_evidence_and_never_pruned(tmp_path):
    base = tiny_bert(tmp_path / "base")
    cfg = stage1_config(base, vocab_size=300, min_count=50, init="distill", prune=0.5, heldout_every=5,
                        distill=DistillConfig(max_steps=4, batch_size=4, eval_every=2, heldout_texts=8))
    without = build_expanded_model(CORPUS, tmp_path / "without", cfg)
    terms = GlossaryTerms((ZORVATIDE, KELTRASE), min_count=2, define_steps=3)
    report = build_expanded_model(CORPUS, tmp_path / "with", cfg, glossary=terms)
    tokens = AutoTokenizer.from_pretrained(tmp_path / "with").get_vocab()
    assert "zorvatide" not in AutoTokenizer.from_pretrained(tmp_path / "without").get_vocab()
    assert {"zorvatide", "keltrase"} <= set(tokens)  # 3 and 2 uses: below min_count 50, at the glossary's 2
    assert {a["token"] for a in report.glossary["added"]} == {"zorvatide", "keltrase"}
    assert report.glossary["defined"]["steps"] == 3 and report.glossary["defined"]["tokens"] == 2
    assert report.tokens_added == without.tokens_added + 2
    ids = json.loads((tmp_path / "with" / "domain_token_ids.json").read_text())
    assert tokens["zorvatide"] in ids and tokens["keltrase"] in ids


def test_a_term_used_less_than_the_glossary_min_count_is_rejected_as_rare(tmp_path):
    base = tiny_bert(tmp_path / "base")
    terms = GlossaryTerms((KELTRASE,), min_count=3, define_steps=0)
    report = build_expanded_model(CORPUS, tmp_path / "out", stage1_config(base, vocab_size=300, min_count=50),
                                  glossary=terms)
    assert report.glossary["added"] == []
    assert report.glossary["rejected"] == [{"token": "keltrase", "term": "keltrase", "reason": "rare", "uses": 2}]


def test_the_teacher_reads_the_sentence_with_the_definition():
    assert _defined("Serum Zorvatide levels rose.", {"zorvatide": "a drug"}) == \
        "Serum Zorvatide (a drug) levels rose."
    assert _defined("Nothing here.", {"zorvatide": "a drug"}) == "Nothing here."


def test_definition_windows_pair_the_plain_sentence_with_the_defined_one(tmp_path):
    base = tiny_bert(tmp_path / "base")
    build_expanded_model(CORPUS, tmp_path / "out", stage1_config(base, vocab_size=300, min_count=50),
                         glossary=GlossaryTerms((ZORVATIDE,), min_count=2, define_steps=0))
    base_tok, new_tok = AutoTokenizer.from_pretrained(base), AutoTokenizer.from_pretrained(tmp_path / "out")
    token = new_tok.convert_tokens_to_ids("zorvatide")
    windows = definition_windows(CORPUS, base_tok, new_tok, {token: ZORVATIDE}, DistillConfig(per_token=2))
    assert len(windows) == 3  # two sentences drawn (they are the same sentence), and the term alone
    student = new_tok.decode(windows[0].new_ids.tolist(), skip_special_tokens=True)
    teacher = base_tok.decode(windows[0].base_ids.tolist(), skip_special_tokens=True)
    assert "zorvatide" in student and "calcium" not in student
    assert "zorvatide a drug that blocks calcium channels in the heart and the cells" in teacher  # ( ) are [UNK]
    assert new_tok.decode(windows[-1].new_ids.tolist(), skip_special_tokens=True) == "zorvatide"


def test_learnt_rows_bring_the_term_to_its_definition_and_leave_the_others(tmp_path):
    base = tiny_bert(tmp_path / "base")
    common = stage1_config(base, vocab_size=300, min_count=50)
    glossary = (ZORVATIDE,)
    build_expanded_model(CORPUS, tmp_path / "mean", common, glossary=GlossaryTerms(glossary, 2, define_steps=0))
    build_expanded_model(CORPUS, tmp_path / "defined", common.model_copy(update={"distill": DistillConfig(lr=3e-2)}),
                         glossary=GlossaryTerms(glossary, 2, define_steps=40))
    mean, defined = (AutoModel.from_pretrained(tmp_path / n).get_input_embeddings().weight for n in ("mean", "defined"))
    tok = AutoTokenizer.from_pretrained(tmp_path / "defined")
    token = tok.convert_tokens_to_ids("zorvatide")
    assert not torch.equal(mean[token], defined[token])
    others = [i for i in range(mean.shape[0]) if i != token]
    assert torch.equal(mean[others], defined[others])  # only the glossary rows move
    record = json.loads((tmp_path / "defined" / "vocab_report.json").read_text())["glossary"]["defined"]
    # The loss it reports: the first and the last pass, or half the steps each when there are fewer than two passes.
    assert record["loss_span"] == min(math.ceil(record["windows"] / record["batch_size"]), 40 // 2)
    assert record["loss_end"] < record["loss_start"]

    def cos(model_dir, student, teacher):
        t = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModel.from_pretrained(model_dir).eval()
        base_tok = AutoTokenizer.from_pretrained(base)
        with torch.no_grad():
            s = model(**t(student, return_tensors="pt")).last_hidden_state.mean(1)
            b = model(**base_tok(teacher, return_tensors="pt")).last_hidden_state.mean(1)
        return float(F.cosine_similarity(s, b))
    sentence = "The patient was given zorvatide and the cells were stained."
    target = ("The patient was given zorvatide (a drug that blocks calcium channels in the heart) and the cells "
              "were stained.")
    assert cos(tmp_path / "defined", sentence, target) > cos(tmp_path / "mean", sentence, target)


def test_a_row_in_every_batch_needs_as_many_steps_as_updates_and_a_row_in_some_needs_more():
    one_term = [frozenset({7})] * 5  # a tick that defines one term: every batch holds its row
    assert steps_for_updates(one_term, batch_size=4, seed=0, updates=30, cap=200) == 30
    assert steps_for_updates(one_term, batch_size=4, seed=0, updates=300, cap=200) == 200  # never past the cap
    many = [frozenset({t}) for t in range(24) for _ in range(3)]  # 24 terms, 3 windows each: 9 batches a pass
    steps = steps_for_updates(many, batch_size=8, seed=0, updates=30, cap=1000)
    assert 30 * 24 / 8 <= steps <= 30 * 9  # a batch holds at most 8 of the 24 rows; a pass, every row at least once
    assert steps_for_updates([frozenset()] * 3, batch_size=4, seed=0, updates=30, cap=200) == 0


def test_a_tick_that_defines_fewer_terms_gives_each_row_the_full_rebuilds_updates_in_smaller_batches(tmp_path):
    base = tiny_bert(tmp_path / "base")
    cfg = stage1_config(base, vocab_size=300, min_count=50, distill=DistillConfig(batch_size=4, per_token=3))
    both = build_expanded_model(CORPUS, tmp_path / "both", cfg,
                                glossary=GlossaryTerms((ZORVATIDE, KELTRASE), 2, define_steps=12)).glossary["defined"]
    assert (both["steps"], both["batch_size"]) == (12, 4) and 0 < both["row_updates"] < 12  # not every batch: both
    budget = RowBudget(both["row_updates"], both["tokens"])
    alone = build_expanded_model(CORPUS, tmp_path / "alone", cfg, glossary=GlossaryTerms(
        (KELTRASE,), 2, define_steps=12, budget=budget)).glossary["defined"]
    assert alone["batch_size"] == 2  # half the terms, half the batch
    assert alone["steps"] == math.ceil(both["row_updates"]) == math.ceil(alone["row_updates"])  # its row in each
