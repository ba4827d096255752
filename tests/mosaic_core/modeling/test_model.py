import pytest
import torch
from builders import tiny_bert, tiny_encoder
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

from mosaic_core.modeling.dual_encoder import PairCollator, build_model
from mosaic_core.modeling.losses import IGNORE, domain_mlm_loss


def test_checkpoint_head_is_loaded_and_decoder_is_tied(tmp_path):
    path = tiny_bert(tmp_path / "m", mlm_head=True)
    model, loaded = build_model(str(path))
    assert loaded
    ref = AutoModelForMaskedLM.from_pretrained(path)
    torch.testing.assert_close(model.head.dense.weight, ref.cls.predictions.transform.dense.weight)
    torch.testing.assert_close(model.head.bias, ref.cls.predictions.bias)
    # Tied: one optimiser step on the MLM loss moves the decoder because it *is* the embeddings.
    states = model.head.transform(torch.randn(3, 32))
    domain = torch.tensor([40, 41, 42])
    loss = domain_mlm_loss(states, domain, model.embeddings, domain, model.head.bias)
    before = model.embeddings.detach().clone()
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=1.0).step()
    assert not torch.equal(before[domain], model.embeddings[domain])  # new domain rows receive gradient
    assert torch.equal(before[:40], model.embeddings[:40].detach())


def test_fresh_head_without_checkpoint_head(tmp_path):
    model, loaded = build_model(str(tiny_bert(tmp_path / "m")))
    assert not loaded and model.head is not None


def test_collator_masks_documents_at_domain_tokens_only(tmp_path):
    path = tiny_bert(tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(path)
    domain = torch.tensor(tok.convert_tokens_to_ids(["patient", "cells"]))
    coll = PairCollator(tok, domain, mlm_probability=1.0, generator=torch.Generator().manual_seed(0))
    batch = coll([("the patient", "the patient and the cells with a cell"), ("q", "a cell")])
    labels = batch["labels"]
    assert set(labels[labels != IGNORE].tolist()) <= set(domain.tolist())
    assert (labels != IGNORE).sum() == 2  # every domain token selected at p=1, nothing else
    assert batch["query_ids"].shape[0] == 2 and batch["query_ids"].shape[1] <= 64
    model, _ = build_model(str(path))
    pooled, states, targets = model.forward_docs(batch["doc_ids"], batch["doc_mask"], labels)
    assert pooled.shape == (2, 32) and states.shape == (2, 32) and targets.tolist() == labels[labels != IGNORE].tolist()


def test_all_token_collator_never_masks_specials_or_padding(tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert(tmp_path / "m"))
    coll = PairCollator(tok, None, mlm_probability=1.0, generator=torch.Generator().manual_seed(0))
    batch = coll([("x", "the patient and the cells"), ("y", "a")])
    selected = batch["labels"] != IGNORE
    assert not (selected & (batch["doc_mask"] == 0)).any()
    assert selected.sum() == 6  # the, patient, and, the, cells + a
    unselected_real = (~selected) & (batch["doc_mask"] == 1)
    assert torch.isin(batch["doc_ids"][unselected_real], torch.tensor(tok.all_special_ids)).all()
    assert unselected_real.sum() == 4  # [CLS] and [SEP] of both documents


@pytest.mark.parametrize("family", ["bert", "roberta", "xlmr"])
def test_collator_encodes_exactly_as_the_tokenizer_call(tmp_path, family, monkeypatch):
    """The collator's fixed Rust encoders give the ids and masks of tokenizer(padding, truncation, max_length),
    truncated documents included; a tokenizer without a Rust backend takes the plain call."""
    tok = AutoTokenizer.from_pretrained(tiny_encoder(tmp_path / "m", family))
    pairs = [("the patient", " ".join(["the cells of a patient"] * 20)), ("cells", "a cell"), ("q", "")]
    ref_q = tok([p[0] for p in pairs], padding=True, truncation=True, max_length=4, return_tensors="pt")
    ref_d = tok([p[1] for p in pairs], padding=True, truncation=True, max_length=24, return_tensors="pt")
    assert ref_d["input_ids"].shape[1] == 24 and ref_q["input_ids"].shape[1] == 4  # both really truncate
    fast = PairCollator(tok, None, query_max_length=4, document_max_length=24, mlm_probability=0.0)(pairs)
    monkeypatch.setattr(type(tok), "backend_tokenizer", None)
    plain = PairCollator(tok, None, query_max_length=4, document_max_length=24, mlm_probability=0.0)(pairs)
    for batch in (fast, plain):
        for side, ref in (("query", ref_q), ("doc", ref_d)):
            assert torch.equal(batch[f"{side}_ids"], ref["input_ids"])
            assert torch.equal(batch[f"{side}_mask"], ref["attention_mask"])


def test_half_precision_checkpoints_load_as_float32_master_weights(tmp_path):
    """Many hub checkpoints store fp16/bf16; training them in that dtype would lose AdamW's small updates."""
    for mlm_head in (True, False):
        path = tiny_bert(tmp_path / f"m{mlm_head}", mlm_head=mlm_head)
        cls = AutoModelForMaskedLM if mlm_head else AutoModel
        cls.from_pretrained(path).to(torch.bfloat16).save_pretrained(path)
        assert cls.from_pretrained(path).dtype == torch.bfloat16  # transformers keeps the stored dtype
        model, loaded = build_model(str(path))
        assert loaded == mlm_head
        assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_model_fingerprint_follows_the_weights_not_the_card(tmp_path):
    from mosaic_core.modeling.fingerprint import model_fingerprint
    from mosaic_core.modeling.modeldir import MODEL_CARD

    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / MODEL_CARD).write_text("# a model\n")
    before = model_fingerprint(str(tmp_path))
    (tmp_path / MODEL_CARD).write_text("# a model\n\nscores: 66.0\n")  # evaluation rewrites the card
    assert model_fingerprint(str(tmp_path)) == before
    (tmp_path / "model.safetensors").write_bytes(b"other weights")
    assert model_fingerprint(str(tmp_path)) != before
