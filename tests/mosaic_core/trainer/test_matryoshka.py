"""Matryoshka InfoNCE (issue 41) against a naive reference: the loss value and its gradients, on
hand-made tensors, through gradient caching, and split over two ranks."""

import pytest
import torch
from builders import tiny_bert
from pydantic import ValidationError
from transformers import AutoTokenizer

from mosaic_core.config import StageConfig
from mosaic_core.modeling.dual_encoder import PairCollator, build_model
from mosaic_core.modeling.losses import JointLoss, domain_mlm_loss, matryoshka_info_nce
from mosaic_core.trainer.build import StageInputError, build_loss, check_matryoshka
from mosaic_core.trainer.gradcache import joint_backward

PAIRS = [("the patient", "the patient was with the cells"), ("cells", "a cell and cells of the patient"),
         ("q q", "the cells were in a patient"), ("a cell", "patient cells"), ("with", "the cell was a cell"),
         ("in cells", "in the patient the cells were")]


def naive_matryoshka(q, d, dims, weights, scale, extra=None, symmetric=False):
    """Row by row: cut every embedding to its first ``dim`` components, renormalise, InfoNCE."""
    def one(queries, columns, n_rows):
        total = 0
        for i in range(n_rows):
            logits = torch.stack([scale * (queries[i] @ c) for c in columns])
            total = total - (logits[i] - torch.logsumexp(logits, 0))
        return total / n_rows

    loss = 0
    for dim, w in zip(dims, weights, strict=True):
        qs = [x[:dim] / x[:dim].norm() for x in q]
        ds = [x[:dim] / x[:dim].norm() for x in d]
        cols = ds + ([x[:dim] / x[:dim].norm() for x in extra] if extra is not None else [])
        term = one(qs, cols, len(qs))
        if symmetric:
            term = (term + one(ds, qs, len(ds))) / 2
        loss = loss + w * term
    return loss


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("weights", [None, (1.0, 0.5, 0.25)])
def test_matryoshka_loss_and_gradients_match_naive_reference(symmetric, weights):
    g = torch.Generator().manual_seed(0)
    q, d = torch.randn(6, 16, generator=g), torch.randn(6, 16, generator=g)
    hn = None if symmetric else torch.randn(3, 16, generator=g)  # hard negatives: query→doc direction only
    dims = (16, 8, 4)
    leaves = [t.clone().requires_grad_() for t in (q, d)]
    ref_leaves = [t.clone().requires_grad_() for t in (q, d)]
    loss = matryoshka_info_nce(*leaves, dims, weights, 20.0, symmetric, hn)
    ref = naive_matryoshka(*ref_leaves, dims, weights or (1.0,) * 3, 20.0, hn, symmetric)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
    loss.backward()
    ref.backward()
    for mine, theirs in zip(leaves, ref_leaves, strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-6)
    # The truncated terms see only their prefixes: the components past the largest dim get no gradient
    # from them, and a single full-size dim is plain InfoNCE.
    plain = JointLoss(scale=20.0, symmetric=symmetric)(q, d, None, hn)["contrastive"]
    assert matryoshka_info_nce(q, d, (16,), None, 20.0, symmetric, hn).item() == pytest.approx(plain.item(), rel=1e-6)
    assert JointLoss(scale=20.0, symmetric=symmetric, matryoshka=(dims, weights))(q, d, None, hn)[
        "contrastive"].item() == pytest.approx(loss.item(), rel=1e-6)


def test_matryoshka_tail_components_learn_only_from_the_full_term():
    g = torch.Generator().manual_seed(1)
    q, d = torch.randn(5, 12, generator=g).requires_grad_(), torch.randn(5, 12, generator=g)
    matryoshka_info_nce(q, d, (6, 3), None, 20.0).backward()
    assert q.grad[:, 6:].abs().sum() == 0 and q.grad[:, :6].abs().sum() > 0
    with pytest.raises(ValueError, match="exceed the embedding size 12"):
        matryoshka_info_nce(q, d, (24, 12), None, 20.0)


def _setup(tmp_path):
    path = tiny_bert(tmp_path / "m", mlm_head=True)  # hidden 32
    tok = AutoTokenizer.from_pretrained(path)
    domain = torch.tensor(tok.convert_tokens_to_ids(["patient", "cells", "cell"]))
    batch = PairCollator(tok, domain, mlm_probability=0.5, generator=torch.Generator().manual_seed(3))(PAIRS)
    return path, domain, batch


@pytest.mark.parametrize(("chunk", "use_mlm"), [(6, True), (2, True), (1, False), (4, False)])
def test_matryoshka_through_gradient_cache_equals_naive_big_batch(tmp_path, chunk, use_mlm):
    """The trainer's loss (built from the stage config) through joint_backward, chunked or not,
    gives the parameter gradients of the naive loss on one big batch."""
    path, domain, batch = _setup(tmp_path)
    stage = StageConfig(name="s", kind="joint" if use_mlm else "contrastive", scale=20.0,
                        matryoshka_dims=(32, 16, 8), matryoshka_weights=(1.0, 1.0, 0.5))
    ref_model, _ = build_model(str(path))
    ref_model.eval()
    q = ref_model.embed(batch["query_ids"], batch["query_mask"])
    if use_mlm:
        d, states, targets = ref_model.forward_docs(batch["doc_ids"], batch["doc_mask"], batch["labels"])
        mlm = domain_mlm_loss(states, targets, ref_model.embeddings, domain, ref_model.head.bias)
    else:
        d, mlm = ref_model.embed(batch["doc_ids"], batch["doc_mask"]), 0
    contrastive = naive_matryoshka(q, d, (32, 16, 8), (1.0, 1.0, 0.5), 20.0)
    (stage.alpha * mlm + contrastive).backward()
    model, _ = build_model(str(path))
    model.eval()
    out = joint_backward(model, batch, build_loss(stage), domain, chunk_size=chunk, use_mlm=use_mlm)
    assert float(out["contrastive"]) == pytest.approx(contrastive.item(), rel=1e-5)
    plain = JointLoss(scale=20.0)(q.detach(), d.detach(), None)["contrastive"]
    assert float(out["contrastive"]) > float(plain)  # the truncated terms add to the full one
    ref = dict(ref_model.named_parameters())
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == {n for n, p in ref.items() if p.grad is not None}
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref[name].grad, rtol=5e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_matryoshka_on_two_ranks_equals_one_process(tmp_path):
    """Each rank scores its queries against every rank's documents (gathered with their
    gradient): the ranks' averaged gradients are one process's on the whole batch."""
    import torch.multiprocessing as mp
    from ranks import matryoshka_rank

    g = torch.Generator().manual_seed(2)
    q, d = torch.randn(6, 8, generator=g), torch.randn(6, 8, generator=g)
    ref = [t.clone().requires_grad_() for t in (q, d)]
    naive_matryoshka(*ref, (8, 4), (1.0, 0.5), 20.0).backward()
    out = mp.Manager().dict()
    mp.spawn(matryoshka_rank, args=(f"file://{tmp_path / 'rendezvous'}", q, d, (8, 4), (1.0, 0.5), out), nprocs=2)
    for rank in (0, 1):
        for got, want in zip(out[rank], ref, strict=True):  # queries, then documents: this rank's rows
            torch.testing.assert_close(torch.from_numpy(got), want.grad[rank * 3:rank * 3 + 3], rtol=1e-4, atol=1e-6)


def test_stage_config_validates_matryoshka_and_hashes_it(tmp_path):
    plain = StageConfig(name="c", kind="contrastive")
    cut = StageConfig(name="c", kind="contrastive", matryoshka_dims=[384, 256, 128, 64])
    assert cut.matryoshka_dims == (384, 256, 128, 64) and cut.config_hash() != plain.config_hash()
    weighted = StageConfig(name="c", kind="contrastive", matryoshka_dims=[384, 256, 128, 64],
                           matryoshka_weights=[1, 1, 1, 2])
    assert weighted.config_hash() != cut.config_hash()
    assert build_loss(weighted).matryoshka == ((384, 256, 128, 64), (1.0, 1.0, 1.0, 2.0))
    assert build_loss(plain).matryoshka is None
    from_cli = StageConfig(name="c", kind="contrastive", matryoshka_dims="384,256,128,64",  # --set key=384,256,...
                           matryoshka_weights="[1, 1, 1, 2]")
    assert from_cli == weighted
    for bad, match in [({"matryoshka_dims": [64, 128]}, "strictly descending"),
                       ({"matryoshka_dims": [128, 128]}, "strictly descending"),
                       ({"matryoshka_dims": [128, 0]}, "positive"),
                       ({"matryoshka_dims": [128, 64], "matryoshka_weights": [1.0]}, "one non-negative weight"),
                       ({"matryoshka_weights": [1.0]}, "without matryoshka_dims"),
                       ({"matryoshka_dims": [128, 64], "kind": "mlm"}, "has none"),
                       ({"matryoshka_dims": [128, 64], "model_kind": "sparse"}, "has none")]:
        with pytest.raises(ValidationError, match=match):
            StageConfig.model_validate({"name": "c", "kind": "contrastive", **bad})
    path = tiny_bert(tmp_path / "m")  # hidden 32
    model, _ = build_model(str(path))
    check_matryoshka(StageConfig(name="c", kind="joint", matryoshka_dims=[32, 8]), model, "tiny")
    with pytest.raises(StageInputError, match=r"exceed the 32-d embeddings of tiny.*at most 32"):
        check_matryoshka(StageConfig(name="c", kind="joint", matryoshka_dims=[64, 32]), model, "tiny")


def test_matryoshka_dims_reach_the_train_cache_key(tmp_path):
    from mosaic_core.config import TrainConfig
    from tasks.train import stage_fingerprint

    path = tiny_bert(tmp_path / "m")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"query": "a", "document": "b"}\n')
    cfg = TrainConfig()
    keys = {stage_fingerprint(str(path), str(pairs), StageConfig(name="c", kind="contrastive", **kw), cfg,
                              str(tmp_path / "out"))
            for kw in ({}, {"matryoshka_dims": [32, 16]}, {"matryoshka_dims": [32, 8]},
                       {"matryoshka_dims": [32, 8], "matryoshka_weights": [1, 2]})}
    assert len(keys) == 4
