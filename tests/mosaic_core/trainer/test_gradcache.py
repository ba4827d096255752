import pytest
import torch
from builders import tiny_bert
from transformers import AutoTokenizer

from mosaic_core.modeling.dual_encoder import PairCollator, build_model
from mosaic_core.modeling.losses import IGNORE, JointLoss, domain_mlm_loss
from mosaic_core.trainer.gradcache import joint_backward

PAIRS = [("the patient", "the patient was with the cells"), ("cells", "a cell and cells of the patient"),
         ("q q", "the cells were in a patient"), ("a cell", "patient cells"), ("with", "the cell was a cell"),
         ("in cells", "in the patient the cells were")]


def setup(tmp_path):
    path = tiny_bert(tmp_path / "m", mlm_head=True)
    tok = AutoTokenizer.from_pretrained(path)
    domain = torch.tensor(tok.convert_tokens_to_ids(["patient", "cells", "cell"]))
    batch = PairCollator(tok, domain, mlm_probability=0.5, generator=torch.Generator().manual_seed(3))(PAIRS)
    return path, domain, batch


def big_batch_grads(path, domain, batch, loss_fn, use_mlm=True):
    model, _ = build_model(str(path))
    model.eval()
    q = model.embed(batch["query_ids"], batch["query_mask"])
    if use_mlm:
        d, states, targets = model.forward_docs(batch["doc_ids"], batch["doc_mask"], batch["labels"])
        mlm = domain_mlm_loss(states, targets, model.embeddings, domain, model.head.bias)
    else:
        d, mlm = model.embed(batch["doc_ids"], batch["doc_mask"]), None
    out = loss_fn(q, d, mlm)
    out["total"].backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, out


@pytest.mark.parametrize("chunk", [1, 2, 4, 6])
@pytest.mark.parametrize("use_mlm", [True, False])
def test_gradient_cache_equals_big_batch(tmp_path, chunk, use_mlm):
    path, domain, batch = setup(tmp_path)
    assert (batch["labels"] != IGNORE).sum() > 0
    loss_fn = JointLoss(alpha=0.3, scale=20.0)
    ref, ref_out = big_batch_grads(path, domain, batch, loss_fn, use_mlm)
    model, _ = build_model(str(path))
    model.eval()
    out = joint_backward(model, batch, loss_fn, domain, chunk_size=chunk, use_mlm=use_mlm)
    assert float(out["total"]) == pytest.approx(ref_out["total"].item(), rel=1e-5)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == ref.keys()
    for name, g in grads.items():
        torch.testing.assert_close(g, ref[name], rtol=1e-4, atol=1e-6, msg=name)


def test_mlm_term_sends_gradient_to_every_domain_row_and_no_other_unused_row(tmp_path):
    from mosaic_core.trainer.gradcache import mlm_backward

    path, domain, batch = setup(tmp_path)
    model, _ = build_model(str(path))
    model.eval()
    out = mlm_backward(model, batch, domain, chunk_size=4)
    assert out["mlm"] > 0 and out["contrastive"] == 0
    grad = model.embeddings.grad
    assert (grad[domain].abs().sum(1) > 0).all()  # the decoder is the embedding matrix: V_D rows learn
    used = set(batch["doc_ids"].unique().tolist()) | set(domain.tolist())
    unused = [i for i in range(grad.shape[0]) if i not in used]
    assert grad[unused].abs().sum() == 0


@pytest.mark.parametrize("chunk", [1, 4, 6])
def test_gradient_cache_with_hard_negatives_equals_big_batch(tmp_path, chunk):
    path = tiny_bert(tmp_path / "m", mlm_head=True)
    tok = AutoTokenizer.from_pretrained(path)
    domain = torch.tensor(tok.convert_tokens_to_ids(["patient", "cells", "cell"]))
    negatives = ["a patient in a cell", "q q q", "with the cells", "the the a"]
    examples = [(q, d, negatives[i % 4], negatives[(i + 1) % 4]) for i, (q, d) in enumerate(PAIRS)]
    batch = PairCollator(tok, domain, mlm_probability=0.5, generator=torch.Generator().manual_seed(3),
                         negatives=2)(examples)
    assert batch["neg_ids"].shape[0] == 2 * len(PAIRS)
    assert "neg_ids" not in PairCollator(tok, domain)(examples)  # negatives=0: in-batch only
    loss_fn = JointLoss(alpha=0.3, scale=20.0)
    ref_model, _ = build_model(str(path))
    ref_model.eval()
    q = ref_model.embed(batch["query_ids"], batch["query_mask"])
    d, states, targets = ref_model.forward_docs(batch["doc_ids"], batch["doc_mask"], batch["labels"])
    mlm = domain_mlm_loss(states, targets, ref_model.embeddings, domain, ref_model.head.bias)
    ref_out = loss_fn(q, d, mlm, ref_model.embed(batch["neg_ids"], batch["neg_mask"]))
    ref_out["total"].backward()
    model, _ = build_model(str(path))
    model.eval()
    out = joint_backward(model, batch, loss_fn, domain, chunk_size=chunk)
    assert float(out["contrastive"]) == pytest.approx(ref_out["contrastive"].item(), rel=1e-5)
    assert float(out["contrastive"]) > float(loss_fn(q, d, None)["contrastive"])  # harder than in-batch alone
    for name, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(p.grad, dict(ref_model.named_parameters())[name].grad, rtol=1e-4, atol=1e-6,
                                       msg=name)


@pytest.mark.parametrize("chunk", [1, 4, 6])
def test_gradient_cache_with_margin_mse_equals_big_batch(tmp_path, chunk):
    path = tiny_bert(tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(path)
    negatives = ["a patient in a cell", "q q q", "with the cells"]
    # pair i has i % 3 negatives (none, one, two): owners follow the items, margins are sliced alike
    examples = [(q, d, *negatives[:i % 3]) for i, (q, d) in enumerate(PAIRS)]
    margins = [[float(i) + 0.5 * j for j in range(i % 3)] for i in range(len(PAIRS))]
    batch = PairCollator(tok, None, negatives=1)(examples, margins=margins)
    assert batch["neg_owner"].tolist() == [1, 2, 4, 5]
    assert batch["neg_margin"].tolist() == [1.0, 2.0, 4.0, 5.0]
    with pytest.raises(ValueError, match="one per hard negative"):
        PairCollator(tok, None, negatives=1)(examples, margins=[[]] * len(PAIRS))
    unlabelled = [[float("nan")] * len(m) for m in margins]  # what the labelling leaves on negatives it skipped
    with pytest.raises(ValueError, match="without a teacher margin"):
        PairCollator(tok, None, negatives=1)(examples, margins=unlabelled)
    assert PairCollator(tok, None, negatives=1)(examples, margins=[m[:1] + [float("nan")] * (len(m) - 1)
                                                                   for m in margins])["neg_margin"].tolist() == [
        1.0, 2.0, 4.0, 5.0]  # a second negative the stage does not train with needs no margin
    loss_fn = JointLoss(alpha=0.0, scale=20.0, objective="margin_mse")
    ref_model, _ = build_model(str(path))
    ref_model.eval()
    q, d = (ref_model.embed(batch[f"{k}_ids"], batch[f"{k}_mask"]) for k in ("query", "doc"))
    ref_out = loss_fn(q, d, None, ref_model.embed(batch["neg_ids"], batch["neg_mask"]),
                      (batch["neg_owner"], batch["neg_margin"]))
    ref_out["total"].backward()
    model, _ = build_model(str(path))
    model.eval()
    out = joint_backward(model, batch, loss_fn, None, chunk_size=chunk, use_mlm=False)
    assert float(out["margin_mse"]) == pytest.approx(ref_out["margin_mse"].item(), rel=1e-5)
    assert "contrastive" not in out
    for name, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(p.grad, dict(ref_model.named_parameters())[name].grad, rtol=1e-4, atol=1e-6,
                                       msg=name)
