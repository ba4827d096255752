"""Distilled initialisation of the new rows (mosaic_core.vocab.distill) on tiny models."""

import json
from collections import Counter

import pytest
import torch
from builders import stage1_config, tiny_bert, tiny_encoder
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer

from mosaic_core.config import DistillConfig
from mosaic_core.vocab import distill as distill_module
from mosaic_core.vocab.build import PRUNE_SHARES, build_expanded_model
from mosaic_core.vocab import windows as windows_module
from mosaic_core.vocab.distill import token_costs, token_drift
from mosaic_core.vocab.windows import (
    _order,
    align_positions,
    draw_sets,
    draw_windows,
    first_windows,
    make_windows,
    reverted,
    split_sentences,
)

TOPICS = ["cardiomyopathy", "immunotherapy", "hepatocytes", "nephropathy", "angiogenesis", "leukocytes"]
CORPUS = [f"the {t} of the patient {i} was with {u} in the cells" for i in range(8) for t in TOPICS
          for u in TOPICS[:2]]
FAST = dict(batch_size=8, max_steps=40, epochs=10, eval_every=5, patience=20, lr=1e-2, heldout_texts=16,
            precision="fp32")


def expand(base, out, prune=0.0, **distill):
    return build_expanded_model(CORPUS, out, stage1_config(base, vocab_size=300, heldout_every=5, init="distill",
                                                           prune=prune, distill=DistillConfig(**{**FAST, **distill})))


@pytest.fixture(scope="module")
def distilled(tmp_path_factory):
    base = tiny_bert(tmp_path_factory.mktemp("base"))
    mean = build_expanded_model(CORPUS, tmp_path_factory.mktemp("mean"),
                                stage1_config(base, vocab_size=300, heldout_every=5, distill=DistillConfig(**FAST)))
    out = tmp_path_factory.mktemp("distilled")
    return base, mean, out, expand(base, out)


def test_distillation_lowers_the_held_out_loss_and_the_drift(distilled):
    _, mean, _, report = distilled
    assert report.init == "distill" and report.tokens_added == mean.tokens_added > 0
    d = report.distill
    assert d["heldout_loss_after"] < 0.8 * d["heldout_loss_before"], d
    assert report.drift["mean_cos"] > report.drift_mean_init["mean_cos"]
    assert report.drift_mean_init == mean.drift_mean_init  # measured on the same rows before distilling
    assert "distilled" in report.to_markdown()


def test_only_new_rows_change_and_texts_without_new_tokens_embed_as_before(distilled):
    base, _, out, report = distilled
    old = AutoModel.from_pretrained(base).state_dict()
    new = AutoModel.from_pretrained(out).state_dict()
    emb = "embeddings.word_embeddings.weight"
    v = old[emb].shape[0]
    assert torch.equal(new[emb][:v], old[emb])
    for name in old:
        if name != emb:
            assert torch.equal(new[name], old[name]), name
    mean_rows = torch.stack([old[emb][AutoTokenizer.from_pretrained(base)(t, add_special_tokens=False)["input_ids"]]
                             .mean(0) for t in ["cardiomyopathy", "immunotherapy"]])
    ids = AutoTokenizer.from_pretrained(out).convert_tokens_to_ids(["cardiomyopathy", "immunotherapy"])
    assert min(ids) >= v and not torch.allclose(new[emb][ids], mean_rows)
    plain = ["the patient was with cells", "a cell is in the cells"]
    st_base, st_new = SentenceTransformer(str(base), device="cpu"), SentenceTransformer(str(out), device="cpu")
    torch.testing.assert_close(st_new.encode(plain, convert_to_tensor=True),
                               st_base.encode(plain, convert_to_tensor=True), rtol=0, atol=0)
    assert json.loads((out / "vocab_report.json").read_text())["distill"]["steps"] == report.distill["steps"]
    assert not (out / distill_module.CHECKPOINT).exists()


def test_interrupted_distillation_resumes_to_the_same_rows(tmp_path, monkeypatch):
    base = tiny_bert(tmp_path / "base")
    full = expand(base, tmp_path / "full", max_steps=12, eval_every=4)
    original, calls = distill_module.RowDistiller.step, {"n": 0}

    def crash_at_nine(self, *args):
        calls["n"] += 1
        if calls["n"] == 9:
            raise KeyboardInterrupt
        return original(self, *args)

    monkeypatch.setattr(distill_module.RowDistiller, "step", crash_at_nine)
    with pytest.raises(KeyboardInterrupt):
        expand(base, tmp_path / "crash", max_steps=12, eval_every=4)
    assert (tmp_path / "crash" / distill_module.CHECKPOINT).is_file()  # written at step 8
    monkeypatch.setattr(distill_module.RowDistiller, "step", original)
    resumed = expand(base, tmp_path / "crash", max_steps=12, eval_every=4)
    assert resumed.distill["steps"] == full.distill["steps"] == 12
    assert [e["step"] for e in resumed.distill["evals"]] == [e["step"] for e in full.distill["evals"]] == [4, 8, 12]
    assert [e["heldout_loss"] for e in resumed.distill["evals"]] == \
        pytest.approx([e["heldout_loss"] for e in full.distill["evals"]], rel=1e-5)
    a = AutoModel.from_pretrained(tmp_path / "full").get_input_embeddings().weight
    b = AutoModel.from_pretrained(tmp_path / "crash").get_input_embeddings().weight
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_the_optimizer_holds_the_trained_rows_alone_and_an_unmarked_checkpoint_is_not_resumed(tmp_path):
    encoder = AutoModel.from_pretrained(tiny_bert(tmp_path / "base"))
    before = encoder.get_input_embeddings().weight.detach().clone()
    distiller = distill_module.RowDistiller(encoder, "mean", [40, 41], 0, DistillConfig(precision="fp32"),
                                            torch.device("cpu"))
    ids = torch.tensor([[2, 40, 41, 3]])
    batch = {"base_ids": ids, "base_mask": torch.ones_like(ids), "new_ids": ids, "new_mask": torch.ones_like(ids),
             "assign": torch.eye(4)[None]}
    distiller.step(batch, 0, 1)
    after = encoder.get_input_embeddings().weight.detach()
    others = [i for i in range(len(before)) if i not in (40, 41)]
    assert torch.equal(after[others], before[others]) and not torch.equal(after[[40, 41]], before[[40, 41]])
    assert distiller.optimizer.state_dict()["state"][0]["exp_avg"].shape == (2, before.shape[1])
    state = distill_module.DistillState(1.0, 1.0, distiller.snapshot())
    state.save(tmp_path / "state.pt", distiller, "fp")
    assert distill_module.DistillState.load(tmp_path / "state.pt", distiller, "fp") is not None
    saved = torch.load(tmp_path / "state.pt", weights_only=True)
    torch.save({k: v for k, v in saved.items() if k != "format"}, tmp_path / "state.pt")  # the layout before 2
    assert distill_module.DistillState.load(tmp_path / "state.pt", distiller, "fp") is None


def test_no_held_out_text_with_a_new_token_picks_the_rows_on_training_windows(tmp_path, monkeypatch):
    base = tiny_bert(tmp_path / "base")
    monkeypatch.setattr(distill_module, "first_windows", lambda *a: [])  # held-out windows; training: sentences
    report = expand(base, tmp_path / "out", max_steps=10, eval_every=5, contexts="sentences")
    d = report.distill
    assert d["evaluated_on"] == "training" and d["heldout_windows"] > 0 and d["steps"] == 10
    assert d["heldout_loss_after"] < d["heldout_loss_before"]
    assert "no held-out text holds a new token" in report.to_markdown()


@pytest.mark.parametrize("family", ["roberta", "xlmr"])
def test_bpe_and_unigram_bases_distill_and_prune_too(tmp_path, family):
    base = tiny_encoder(tmp_path / "base", family)
    report = expand(base, tmp_path / "out", prune=0.25, max_steps=10)
    assert report.tokens_added > 0 and report.distill["windows"] > 0
    assert report.distill["heldout_loss_after"] < report.distill["heldout_loss_before"]
    assert report.pruned["dropped"] > 0 and report.tokens_added < report.pruned["tokens_before"]
    old = AutoModel.from_pretrained(base).get_input_embeddings().weight
    new = AutoModel.from_pretrained(tmp_path / "out").get_input_embeddings().weight
    assert torch.equal(new[: old.shape[0]], old) and new.shape[0] == old.shape[0] + report.tokens_added
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert len(tok) == new.shape[0]  # every row is a token: ids contiguous after the drop
    assert not {t["token"] for t in report.pruned["costliest"]} & set(tok.get_vocab())


def test_windows_align_each_base_piece_with_the_new_token_that_covers_it(distilled):
    base, _, out, _ = distilled
    base_tok, new_tok = AutoTokenizer.from_pretrained(base), AutoTokenizer.from_pretrained(out)
    text = "the cardiomyopathy of a patient"
    first = len(base_tok)
    (window,) = make_windows([text, "the patient"], base_tok, new_tok, 64, first)  # "the patient": no new token
    base_tokens = base_tok.convert_ids_to_tokens(window.base_ids.tolist())
    new_tokens = new_tok.convert_ids_to_tokens(window.new_ids.tolist())
    assert new_tokens == ["[CLS]", "the", "cardiomyopathy", "of", "a", "patient", "[SEP]"]
    assert [new_tokens[j] for j in window.align] == [
        "[CLS]", "the", *["cardiomyopathy"] * (len(base_tokens) - 6), "of", "a", "patient", "[SEP]"]
    # Cut after "of" (the base tokens up to it plus [SEP]): both tokenizations read "the cardiomyopathy of".
    cut = base_tokens.index("of") + 2
    (short,) = make_windows([text], base_tok, new_tok, cut, first)
    assert len(short.base_ids) == cut and new_tok.convert_ids_to_tokens(short.new_ids.tolist()) == \
        ["[CLS]", "the", "cardiomyopathy", "of", "[SEP]"]
    assert align_positions(base_tok._tokenizer.encode("the patient"), new_tok._tokenizer.encode("the patient")) \
        == [0, 1, 2, 3]


def test_token_drift_measures_what_reading_one_token_as_its_pieces_again_restores(distilled):
    base, _, out, report = distilled
    base_tok, new_tok = AutoTokenizer.from_pretrained(base), AutoTokenizer.from_pretrained(out)
    first = len(base_tok)
    text = "the cardiomyopathy of the immunotherapy patient"
    (window,) = make_windows([text], base_tok, new_tok, 64, first)
    cardio = new_tok.convert_tokens_to_ids("cardiomyopathy")
    one = reverted(window, cardio)  # the other new token stays
    assert new_tok.convert_ids_to_tokens(one) == [
        "[CLS]", "the", *base_tok.tokenize("cardiomyopathy"), "of", "the", "immunotherapy", "patient", "[SEP]"]
    # With the only new token of a text read as its pieces, the text is the base model's again:
    # the rise is exactly 1 - cos(base, stage 1) of that text.
    single = "the cardiomyopathy of a patient"
    (measured,) = token_drift(AutoModel.from_pretrained(out), "mean", base_tok, new_tok, [single], 64, first)
    st_base, st_new = SentenceTransformer(str(base), device="cpu"), SentenceTransformer(str(out), device="cpu")
    cos = torch.nn.functional.cosine_similarity(st_base.encode([single], convert_to_tensor=True),
                                                st_new.encode([single], convert_to_tensor=True)).item()
    assert measured["token"] == "cardiomyopathy" and measured["texts"] == 1
    assert measured["total_rise"] == pytest.approx(1 - cos, abs=1e-5) and measured["total_rise"] > 0
    totals = [t["total_rise"] for t in report.token_drift]
    assert report.token_drift and totals == sorted(totals, reverse=True)
    assert "still move embeddings" in report.to_markdown()


def test_sentences_split_after_a_final_stop_before_a_capital_digit_or_bracket():
    texts = ["Propranolol lowered pressure (p < 0.05). Verapamil did not! Why? e.g. the 2nd arm.",
             "  A title without a stop  ", ""]
    assert split_sentences(texts) == ["Propranolol lowered pressure (p < 0.05).", "Verapamil did not!",
                                      "Why? e.g. the 2nd arm.", "A title without a stop"]


def test_per_token_contexts_draw_up_to_k_windows_for_every_token_rare_ones_included():
    tokens = [[100]] * 50 + [[100, 101]] * 3 + [[]]  # token 100 in 50 windows, 101 only in 3, one without any
    kept = draw_sets(tokens, 5, seed=0)
    uses = Counter(t for i, _ in kept for t in tokens[i])
    assert uses[101] == 3  # every window of the rare token, though 100 had its 5 before some of them
    assert 5 <= uses[100] <= 5 + 3 and len(kept) == uses[100]
    assert all(tokens[i] and set(owed) <= set(tokens[i]) for i, owed in kept)
    assert draw_sets(tokens, 5, seed=0) == kept  # the seed decides
    assert draw_sets(tokens, 5, seed=1) != kept


def _drawn_in_memory(texts, base_tok, new_tok, max_length, first, k, seed):
    """The reference: every sentence's window held at once, then the per-token draw."""
    windows = make_windows(split_sentences(texts), base_tok, new_tok, max_length, first)
    seen, kept = Counter(), []
    for i in _order(len(windows), seed, 0):
        tokens = sorted({int(t) for t in windows[i].new_ids if t >= first})
        owed = [t for t in tokens if seen[t] < k]
        if owed:
            kept.append((windows[i], owed))
            seen.update(tokens)
    return kept


@pytest.mark.parametrize("k, seed", [(1, 0), (3, 0), (3, 7), (1000, 1)])
def test_streamed_draw_is_the_in_memory_draw(distilled, monkeypatch, k, seed):
    base, _, out, _ = distilled
    base_tok, new_tok = AutoTokenizer.from_pretrained(base), AutoTokenizer.from_pretrained(out)
    texts = [f"{a}. The {b} of {c}! Patients with {c} were seen." for a, b, c in
             zip(CORPUS, CORPUS[5:] + CORPUS[:5], TOPICS * 20, strict=False)]
    monkeypatch.setattr(windows_module, "WINDOW_CHUNK", 7)  # many chunks: positions must carry across them
    streamed = draw_windows(texts, base_tok, new_tok, 64, len(base_tok), k, seed)
    reference = _drawn_in_memory(texts, base_tok, new_tok, 64, len(base_tok), k, seed)
    def plain(windows):
        return [(w.new_ids.tolist(), w.base_ids.tolist(), w.align.tolist(), owed) for w, owed in windows]

    assert plain(streamed) == plain(reference) and len(streamed) > 1
    assert plain((w, None) for w in first_windows(iter(texts), base_tok, new_tok, 64, len(base_tok), 5)) == \
        plain((w, None) for w in make_windows(texts, base_tok, new_tok, 64, len(base_tok))[:5])


def test_sentence_contexts_distill_from_sentences_and_lower_the_held_out_loss(tmp_path):
    base = tiny_bert(tmp_path / "base")
    report = expand(base, tmp_path / "out", per_token=4, max_steps=10)  # contexts="sentences": the default
    full = expand(base, tmp_path / "texts", contexts="texts", max_steps=10)
    d = report.distill
    # CORPUS: 96 one-sentence texts, each new token in many; 4 per token leaves far fewer.
    assert 0 < d["windows"] <= 4 * report.tokens_added < full.distill["windows"]
    assert d["heldout_loss_after"] < d["heldout_loss_before"]


def test_token_costs_put_a_spoiled_row_first_and_count_the_pieces_it_saves(distilled):
    base, _, out, _ = distilled
    base_tok, new_tok = AutoTokenizer.from_pretrained(base), AutoTokenizer.from_pretrained(out)
    model, first = AutoModel.from_pretrained(out), len(base_tok)
    spoiled = new_tok.convert_tokens_to_ids("hepatocytes")
    with torch.no_grad():
        model.get_input_embeddings().weight[spoiled] *= -20
    costs = token_costs(model, "mean", base_tok, new_tok, CORPUS, 64, first, k=3)
    assert max(costs, key=lambda t: costs[t]["cost"]) == spoiled
    assert costs[spoiled]["saved"] == len(base_tok.tokenize("hepatocytes")) - 1
    assert costs[spoiled]["cost"] == pytest.approx(costs[spoiled]["rise"] / costs[spoiled]["saved"])
    assert all(1 <= c["sentences"] <= 3 for c in costs.values())
    assert costs == token_costs(model, "mean", base_tok, new_tok, CORPUS, 64, first, k=3)  # a function of the seed


def test_pruning_drops_the_costliest_tokens_and_the_rest_keep_their_distilled_rows(distilled, tmp_path):
    base, _, full_dir, full = distilled
    report = expand(base, tmp_path / "pruned", prune=0.34)
    p = report.pruned
    assert p["tokens_before"] == full.tokens_added and p["dropped"] == round(0.34 * full.tokens_added) > 0
    assert report.tokens_added == full.tokens_added - p["dropped"] - p["settled_out"]
    assert report.rejected["costly"] == p["dropped"]
    dropped = [t["token"] for t in p["costliest"]]
    costs = [t["cost"] for t in p["costliest"]]
    assert costs == sorted(costs, reverse=True) and costs[-1] >= p["kept_max_cost"]
    tok, full_tok = AutoTokenizer.from_pretrained(tmp_path / "pruned"), AutoTokenizer.from_pretrained(full_dir)
    first = len(AutoTokenizer.from_pretrained(base))
    assert not set(dropped) & set(tok.get_vocab())
    kept = tok.convert_ids_to_tokens(list(range(first, len(tok))))  # contiguous ids from the first new one
    assert len(kept) == report.tokens_added and not set(kept) & set(dropped)
    emb = "embeddings.word_embeddings.weight"
    old = AutoModel.from_pretrained(full_dir).state_dict()
    new = AutoModel.from_pretrained(tmp_path / "pruned").state_dict()
    assert new[emb].shape[0] == first + len(kept)
    assert torch.equal(new[emb][:first], old[emb][:first])
    assert torch.equal(new[emb][first:], old[emb][full_tok.convert_tokens_to_ids(kept)])
    word = dropped[0].removeprefix("##")
    assert tok.tokenize(word) == AutoTokenizer.from_pretrained(base).tokenize(word)  # read as base pieces again
    assert p["fertility_before"] == pytest.approx(full.fertility_after)
    assert report.fertility_after >= full.fertility_after
    assert p["drift_before"] == full.drift
    assert "Pruned" in report.to_markdown() and "costly" in report.to_markdown()


def test_pruning_reports_the_trade_off_of_every_share_as_a_run_at_that_share_measures_it(distilled, tmp_path):
    base, _, _, full = distilled
    report = expand(base, tmp_path / "pruned", prune=0.34)
    points = report.pruned["trade_off"]
    assert [q["share"] for q in points] == sorted({*PRUNE_SHARES, 0.34})
    tokens, fertility = [q["tokens"] for q in points], [q["fertility"] for q in points]
    assert tokens == sorted(tokens, reverse=True) and tokens[0] < full.tokens_added
    assert fertility == sorted(fertility) and fertility[0] >= full.fertility_after
    chosen = next(q for q in points if q["share"] == 0.34)
    assert (chosen["tokens"], chosen["fertility"], chosen["drift"]) == (report.tokens_added, report.fertility_after,
                                                                        report.drift)
    at_half = expand(base, tmp_path / "half", prune=0.5)  # the 50 % point, built for real
    half = next(q for q in points if q["share"] == 0.5)
    assert (half["tokens"], half["fertility"]) == (at_half.tokens_added, at_half.fertility_after)
    assert half["drift"]["mean_cos"] == pytest.approx(at_half.drift["mean_cos"], abs=1e-6)
    assert "Pruning: the trade-off" in report.to_markdown() and "50% |" in report.to_markdown()
