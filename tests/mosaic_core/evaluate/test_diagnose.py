import json

import torch
from builders import stage1_config, tiny_bert
from transformers import AutoModelForMaskedLM, AutoTokenizer

from mosaic_core.evaluate.diagnose import diagnose_term, term_sentences
from mosaic_core.evaluate.probe import make_probe
from mosaic_core.vocab.build import build_expanded_model

SENTENCES = ["The patient was in a cell.", "Cells of the patient were with q.", "A patient, and the patients."]


def test_term_sentences_match_whole_words_case_insensitively():
    texts = ["The Patient was seen. Nothing here. The patients were seen.", "outpatient care", "a patient"]
    assert term_sentences(texts, "patient", 10) == ["The Patient was seen.", "a patient"]
    assert term_sentences(texts, "patient", 1) == ["The Patient was seen."]


def test_mlm_logit_and_rank_match_the_checkpoints_masked_lm(tmp_path):
    path = tiny_bert(tmp_path / "m", mlm_head=True)
    result = diagnose_term(str(path), "patient", SENTENCES, neighbours=5)
    assert result.single_token and result.pieces == ["patient"] and "checkpoint" in result.head
    assert len(result.occurrences) == 3  # "patients" is another word
    tok, mlm = AutoTokenizer.from_pretrained(path), AutoModelForMaskedLM.from_pretrained(path).eval()
    target = tok.convert_tokens_to_ids("patient")
    for occurrence, sentence in zip(result.occurrences, SENTENCES, strict=True):
        ids = tok(sentence, return_tensors="pt")["input_ids"]
        pos = (ids[0] == target).nonzero()[0].item()
        ids[0, pos] = tok.mask_token_id
        with torch.no_grad():
            logits = mlm(input_ids=ids).logits[0, pos]
        assert abs(occurrence["logit"] - logits[target].item()) < 1e-4
        assert occurrence["rank"] == int((logits > logits[target]).sum()) + 1
    emb = mlm.get_input_embeddings().weight.detach()
    cos = torch.nn.functional.cosine_similarity(emb, emb[target][None], dim=1)
    cos[[target, *tok.all_special_ids]] = -2
    assert [t for t, _ in result.neighbours] == tok.convert_ids_to_tokens(cos.topk(5).indices.tolist())
    assert json.loads(result.to_json())["median_rank"] == result.median_rank
    assert "median rank" in result.to_text()


def test_expanded_term_is_one_domain_token_with_a_fresh_head_flagged(tmp_path):
    base = tiny_bert(tmp_path / "base")
    out = tmp_path / "expanded"
    build_expanded_model(["cardiomyopathy in the patient"] * 40, out, stage1_config(base, vocab_size=300,
                                                                                     heldout_every=10))
    result = diagnose_term(str(out), "cardiomyopathy", ["The cardiomyopathy was severe."], base_model=str(base))
    assert result.single_token and result.in_domain_vocab and len(result.base_pieces) > 1
    assert "fresh" in result.head and result.row == "embedding row"
    split = diagnose_term(str(base), "cardiomyopathy", [])
    assert not split.single_token and split.row.startswith("mean of its") and not split.occurrences


def test_probe_queries_never_name_the_word_and_relevant_documents_do():
    probe = make_probe("zentrolase")
    assert probe.train_pairs and all("zentrolase" in (p["query"] + p["document"]).lower() for p in probe.train_pairs)
    assert not any("zentrolase" in q.lower() for q in probe.queries.values())
    texts = {c["id"]: c["text"].lower() for c in probe.corpus}
    for judged in probe.qrels.values():
        assert judged and all("zentrolase" in texts[d] for d in judged)
    assert sum("zentrolase" in t for t in texts.values()) == len(next(iter(probe.qrels.values())))
    assert make_probe("zentrolase") == probe  # deterministic
