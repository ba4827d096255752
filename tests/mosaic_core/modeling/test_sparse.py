"""The sparse (SPLADE) model kind on a tiny BERT with an MLM head: the representation against
sentence-transformers' own SpladePooling, the FLOPS regulariser against its definition, exact
gradient caching, stage 1 and a training stage written as SparseEncoders that load and score
the same, and the term-activation diagnostic."""

import json

import pytest
import torch
from builders import tiny_bert
from transformers import AutoTokenizer

from mosaic_core.config import StageConfig, VocabConfig
from mosaic_core.evaluate.diagnose import diagnose_term
from mosaic_core.evaluate.probe import make_probe, sparse_activation
from mosaic_core.modeling.dual_encoder import PairCollator, build_model
from mosaic_core.modeling.losses import JointLoss
from mosaic_core.modeling.sparse import flops, is_sparse_dir, splade, term_activation
from mosaic_core.trainer.build import StageInputError
from mosaic_core.trainer.gradcache import joint_backward
from mosaic_core.trainer.heldout import RetrievalProbe
from mosaic_core.trainer.merge import merge_models, validation_score
from mosaic_core.trainer.stage import train_stage

PAIRS = [(f"what about {w} {i}", f"the {w} was with the cells of patient {i}")
         for i, w in enumerate(["cell", "patient", "cells", "with", "was", "the"] * 3)]


def test_splade_equals_sentence_transformers_pooling():
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    logits = torch.randn(3, 7, 50)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5])
    theirs = SpladePooling("max", "relu")({"token_embeddings": logits, "attention_mask": mask})["sentence_embedding"]
    torch.testing.assert_close(splade(logits, mask), theirs)
    assert (splade(logits, mask) >= 0).all()
    logits[1, 5] = 1e4  # a padded position never counts
    torch.testing.assert_close(splade(logits, mask)[1], theirs[1])


def test_flops_is_the_sum_of_squared_mean_weights():
    reps = torch.rand(4, 6)
    naive = sum((sum(float(reps[i, j]) for i in range(4)) / 4) ** 2 for j in range(6))
    assert float(flops(reps)) == pytest.approx(naive, rel=1e-6)
    spread, one_hot = torch.eye(4), torch.zeros(4, 4)
    one_hot[:, 0] = 1  # the same total weight on one dimension for every text costs more
    assert flops(one_hot) > flops(spread)


@pytest.mark.parametrize("chunk", [2, 6])
def test_sparse_gradient_cache_equals_big_batch(tmp_path, chunk):
    path = tiny_bert(tmp_path / "m", mlm_head=True)
    tok = AutoTokenizer.from_pretrained(path)
    batch = PairCollator(tok, None, mlm_probability=0.0, negatives=1)(
        [(q, d, PAIRS[(i + 3) % 6][1]) for i, (q, d) in enumerate(PAIRS[:6])])
    loss_fn = JointLoss(alpha=0.0, flops=(1e-2, 1e-2))
    ref, _ = build_model(str(path), kind="sparse")
    ref.eval()
    out = loss_fn(ref.embed(batch["query_ids"], batch["query_mask"]), ref.embed(batch["doc_ids"], batch["doc_mask"]),
                  None, ref.embed(batch["neg_ids"], batch["neg_mask"]))
    assert out["flops"] > 0
    out["total"].backward()
    model, _ = build_model(str(path), kind="sparse")
    model.eval()
    cached = joint_backward(model, batch, loss_fn, None, chunk_size=chunk, use_mlm=False)
    assert float(cached["flops"]) == pytest.approx(out["flops"].item(), rel=1e-5)
    assert float(cached["total"]) == pytest.approx(out["total"].item(), rel=1e-5)
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_sparse_stage1_and_training_write_sparse_encoders_that_score_as_trained(tmp_path):
    from sentence_transformers import SparseEncoder

    from mosaic_core.vocab.build import build_expanded_model

    base = tiny_bert(tmp_path / "base", mlm_head=True)
    corpus = [f"the cardiomyocyte and the fibroblast of patient {i} were with cells" for i in range(40)]
    cfg = VocabConfig(base_model=str(base), vocab_size=150, min_count=5, init="mean", model_kind="sparse",
                      prune=0.0)  # keeps "cardiomyocyte", the term the test follows
    report = build_expanded_model(corpus, tmp_path / "s1", cfg)
    assert report.tokens_added > 0 and is_sparse_dir(tmp_path / "s1")
    st = SparseEncoder(str(tmp_path / "s1"), device="cpu")
    ids = json.loads((tmp_path / "s1" / "domain_token_ids.json").read_text())
    assert st.get_embedding_dimension() == ids[-1] + 1  # the new rows are new output dimensions
    assert st.encode(["the cardiomyocyte"], convert_to_tensor=True).shape[-1] == ids[-1] + 1
    bias = st[0].auto_model.cls.predictions.bias
    assert bias.shape[0] == ids[-1] + 1 and bias[ids].abs().sum() > 0  # grown from the pieces' biases

    stage = StageConfig(name="c", kind="joint", model_kind="sparse", batch_size=6, chunk_size=3, max_steps=4, lr=1e-3,
                        log_every=2, device="cpu", flops_query=1e-3, flops_document=1e-3)
    pairs = [(q, d.replace("cells", "cardiomyocyte cells")) for q, d in PAIRS]
    probe = RetrievalProbe([q for q, _ in pairs[:4]], [d for _, d in pairs[:8]], [0, 1, 2, 3])
    result = train_stage(str(tmp_path / "s1"), pairs, stage, tmp_path / "out", validation=probe)
    assert result.final["flops"] > 0 and result.final["mlm"] > 0
    assert is_sparse_dir(tmp_path / "out") and not (tmp_path / "out" / "mlm_head.safetensors").exists()
    trained = SparseEncoder(str(tmp_path / "out"), device="cpu")
    model, from_checkpoint = build_model(str(tmp_path / "out"), kind="sparse")
    assert from_checkpoint  # the head is inside the masked-LM checkpoint
    texts = ["the cardiomyocyte was with cells", "patient"]
    enc = trained.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        mine = model.eval().embed(enc["input_ids"], enc["attention_mask"])
    torch.testing.assert_close(mine, trained.encode(texts, convert_to_tensor=True).to_dense())
    before = SparseEncoder(str(tmp_path / "s1"), device="cpu").encode(texts, convert_to_tensor=True).to_dense()
    assert not torch.allclose(mine, before)  # training changed what the saved model computes

    term = trained.tokenizer.convert_tokens_to_ids("cardiomyocyte")
    assert term in ids
    activation = term_activation(trained, "cardiomyocyte", texts[:1])
    assert activation["pieces"] == ["cardiomyocyte"] and activation["texts"] == 1
    assert activation["mean_weight"] == pytest.approx(float(mine[0, term]), rel=1e-5)

    diagnosis = diagnose_term(str(tmp_path / "out"), "cardiomyocyte", texts[:1])
    assert diagnosis.activation == activation and "SPLADE representation" in diagnosis.to_text()
    invented = make_probe("quorvane")
    seen = sparse_activation(trained, invented)
    assert seen["naming"]["texts"] == 8 and seen["describing"]["texts"] == len(invented.queries)
    assert seen["naming"]["mean_weight"] > 0  # the word's own pieces fire where it is written

    merged = merge_models(str(tmp_path / "s1"), str(tmp_path / "out"), 0.5, tmp_path / "merged")
    assert is_sparse_dir(merged)  # WiSE-FT of sparse models stays sparse: encoder halfway, the end's head
    halfway = SparseEncoder(str(merged), device="cpu")[0].auto_model.bert.embeddings.word_embeddings.weight
    ends = [SparseEncoder(str(tmp_path / d), device="cpu")[0].auto_model.bert.embeddings.word_embeddings.weight
            for d in ("s1", "out")]
    torch.testing.assert_close(halfway, (ends[0] + ends[1]) / 2)
    assert 0 < validation_score(str(merged), probe, 16, 32)["ndcg@10"] <= 1

    with pytest.raises(StageInputError, match="sparse"):
        train_stage(str(tmp_path / "out"), pairs, stage.model_copy(update={"model_kind": "dense"}), tmp_path / "d")


def test_a_sparse_model_needs_its_head(tmp_path):
    path = tiny_bert(tmp_path / "m")  # no MLM head in the checkpoint: built fresh, and a sparse model keeps it
    model, from_checkpoint = build_model(str(path), kind="sparse")
    assert not from_checkpoint and model.head is not None
    with pytest.raises(ValueError, match="MLM head"):
        build_model(str(path), with_mlm=False, kind="sparse")
