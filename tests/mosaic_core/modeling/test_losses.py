import math

import pytest
import torch
import torch.nn.functional as F

from mosaic_core.modeling.losses import (
    IGNORE,
    JointLoss,
    domain_mlm_loss,
    full_mlm_loss,
    info_nce,
    margin_mse,
    mask_tokens,
)


def naive_info_nce(q, d, scale, extra=None):
    q = [x / x.norm() for x in q]
    cols = [x / x.norm() for x in (list(d) + (list(extra) if extra is not None else []))]
    total = 0.0
    for i, qi in enumerate(q):
        logits = [scale * float(qi @ c) for c in cols]
        m = max(logits)
        total += -(logits[i] - m - math.log(sum(math.exp(v - m) for v in logits)))
    return total / len(q)


def test_info_nce_matches_naive_reference():
    g = torch.Generator().manual_seed(0)
    q, d, hn = torch.randn(6, 8, generator=g), torch.randn(6, 8, generator=g), torch.randn(3, 8, generator=g)
    assert info_nce(q, d, scale=20.0).item() == pytest.approx(naive_info_nce(q, d, 20.0), rel=1e-5)
    assert info_nce(q, d, 20.0, hard_negatives=hn).item() == pytest.approx(naive_info_nce(q, d, 20.0, hn), rel=1e-5)
    sym = info_nce(q, d, 20.0, symmetric=True).item()
    assert sym == pytest.approx((naive_info_nce(q, d, 20.0) + naive_info_nce(d, q, 20.0)) / 2, rel=1e-5)


def test_domain_mlm_equals_full_logits_with_non_domain_masked():
    """The authors compute every logit and fill non-domain ones with -inf; gathering only the
    |V_D| rows must give the same loss and the same gradients."""
    g = torch.Generator().manual_seed(1)
    emb = torch.randn(50, 16, generator=g, requires_grad=True)
    bias = torch.randn(50, generator=g)
    states = torch.randn(7, 16, generator=g, requires_grad=True)
    domain = torch.tensor([3, 10, 11, 40, 49])
    targets = domain[torch.tensor([0, 1, 4, 4, 2, 3, 0])]
    ours = domain_mlm_loss(states, targets, emb, domain, bias)
    full = states @ emb.T + bias
    masked = torch.full_like(full, float("-inf"))
    masked[:, domain] = full[:, domain]
    ref = F.cross_entropy(masked, targets)
    assert ours.item() == pytest.approx(ref.item(), rel=1e-6)
    g1 = torch.autograd.grad(ours, [states, emb])
    g2 = torch.autograd.grad(ref, [states, emb])
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b)
    assert g1[1][domain].abs().sum() > 0 and g1[1][[0, 1, 2]].abs().sum() == 0  # only V_D rows learn


def test_mlm_targets_outside_domain_are_rejected_and_empty_is_zero():
    emb, domain = torch.randn(10, 4), torch.tensor([5, 6])
    with pytest.raises(ValueError, match="domain tokens"):
        domain_mlm_loss(torch.randn(1, 4), torch.tensor([2]), emb, domain)
    assert domain_mlm_loss(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long), emb, domain).item() == 0.0
    assert full_mlm_loss(torch.randn(2, 4), torch.tensor([2, 9]), emb).item() > 0


def test_masking_touches_only_candidates_with_80_10_10():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (64, 128), generator=g)
    ids[:, 0], ids[:, -10:] = 1, 0  # [CLS], padding
    candidates = (ids >= 60) & (ids != 1) & (ids != 0)  # "domain tokens"
    random_ids = torch.arange(60, 100)
    masked, labels = mask_tokens(ids, candidates, mask_token_id=4, random_ids=random_ids, probability=0.15,
                                 generator=torch.Generator().manual_seed(1))
    selected = labels != IGNORE
    assert not (selected & ~candidates).any()
    assert torch.equal(masked[~selected], ids[~selected])
    assert torch.equal(labels[selected], ids[selected])
    rate = selected.sum() / candidates.sum()
    assert 0.13 < rate < 0.17
    n = selected.sum().item()
    frac_mask = (masked[selected] == 4).sum().item() / n
    frac_keep = (masked[selected] == ids[selected]).sum().item() / n
    assert 0.76 < frac_mask < 0.84 and 0.07 < frac_keep < 0.14  # keep = 10 % + random hits on itself
    assert torch.isin(masked[selected & (masked != 4)], random_ids).all()


def test_joint_loss_components():
    q, d = torch.randn(4, 8), torch.randn(4, 8)
    out = JointLoss(alpha=0.3, scale=50.0)(q, d, torch.tensor(2.0))
    assert out["total"].item() == pytest.approx(0.3 * 2.0 + out["contrastive"].item())
    assert JointLoss()(q, d, None)["mlm"].item() == 0.0


def test_margin_mse_matches_naive_reference_and_is_zero_at_the_teachers_margins():
    torch.manual_seed(0)
    q, d, n = torch.randn(3, 8), torch.randn(3, 8), torch.randn(5, 8)
    owner, teacher = torch.tensor([0, 0, 1, 2, 2]), torch.randn(5) * 4
    cos = F.cosine_similarity
    naive = sum((20.0 * (cos(q[o], d[o], 0) - cos(q[o], n[j], 0)) - teacher[j]) ** 2
                for j, o in enumerate(owner.tolist())) / 5
    assert margin_mse(q, d, n, owner, teacher, scale=20.0).item() == pytest.approx(naive.item(), rel=1e-5)
    student = torch.stack([20.0 * (cos(q[o], d[o], 0) - cos(q[o], n[j], 0)) for j, o in enumerate(owner.tolist())])
    assert margin_mse(q, d, n, owner, student, scale=20.0).item() == pytest.approx(0.0, abs=1e-9)
    # gradient pulls the student's margin toward the teacher's: a larger teacher margin raises cos(q, d)
    qq = q.clone().requires_grad_()
    margin_mse(qq, d, n[:1], owner[:1], student[:1] + 5.0, scale=20.0).backward()
    step = (qq - 1e-3 * qq.grad).detach()
    assert (cos(step[0], d[0], 0) - cos(step[0], n[0], 0)) > (cos(q[0], d[0], 0) - cos(q[0], n[0], 0))


def test_joint_loss_with_margin_mse_has_its_own_term_and_zero_without_negatives():
    q, d, n = torch.randn(2, 8), torch.randn(2, 8), torch.randn(2, 8)
    margins = (torch.tensor([0, 1]), torch.tensor([3.0, -1.0]))
    loss = JointLoss(alpha=0.5, scale=10.0, objective="margin_mse")
    out = loss(q, d, torch.tensor(2.0), n, margins)
    assert set(out) == {"total", "mlm", "margin_mse"}
    assert out["margin_mse"].item() == pytest.approx(margin_mse(q, d, n, *margins, 10.0).item())
    assert out["total"].item() == pytest.approx(1.0 + out["margin_mse"].item())
    assert loss(q, d, None)["margin_mse"].item() == 0.0  # a batch with no negative distils nothing
    with pytest.raises(ValueError, match="teacher's margin"):
        loss(q, d, None, n)
    with pytest.raises(ValueError, match="no sparse or Matryoshka"):
        JointLoss(matryoshka=((8, 4), None), objective="margin_mse")


def test_every_display_of_the_losses_reads_the_declared_terms():
    # The stage table shows each term some stage of the run recorded (the SPLADE `flops` term
    # included), and no column for a term no stage computed.
    from flows.train import stage_rows
    from mosaic_core.config import StageConfig
    from mosaic_core.modeling.losses import LOSS_TERMS, loss_terms

    def result(stage: str, final: dict) -> dict:
        return {"stage": stage, "steps": 3, "pairs": 10, "final": final, "evals": [], "seconds": 6,
                "resumed_from": None, "out_dir": f"/x/{stage}"}

    sparse = [result("joint", {"total": 3.0, "mlm": 2.0, "contrastive": 0.5, "flops": 0.1}),
              result("contrastive", {"total": 0.6, "contrastive": 0.5, "flops": 0.1})]
    rows = stage_rows(sparse)
    assert [k for k in rows[0] if k in LOSS_TERMS] == ["mlm", "contrastive", "flops"]
    assert rows[1]["flops"] == 0.1 and rows[1]["mlm"] == 0.0
    dense = stage_rows([result("contrastive", {"total": 0.6, "contrastive": 0.6})])
    assert [k for k in dense[0] if k in LOSS_TERMS] == ["contrastive"]
    assert loss_terms(StageConfig(name="s", kind="joint", model_kind="sparse")) == ["mlm", "contrastive", "flops"]
    assert loss_terms(StageConfig(name="w", kind="mlm")) == ["mlm"]
    assert set(loss_terms(StageConfig(name="c", kind="contrastive"))) <= set(LOSS_TERMS)
    assert loss_terms(StageConfig(name="g", kind="joint", objective="margin_mse", teacher="ce",
                                  hard_negatives=1)) == ["mlm", "margin_mse"]


def test_every_stage_row_has_the_same_columns_when_a_stage_scored_no_validation():
    from flows.train import stage_rows

    scored = {"stage": "mlm", "steps": 20, "pairs": 835, "final": {"total": 4.3, "mlm": 4.3}, "seconds": 60,
              "evals": [{"step": 20, "ndcg@10": 0.7088, "mrr": 0.6382, "n": 64}], "resumed_from": None, "out_dir": "a"}
    unscored = {**scored, "stage": "dictionary", "evals": [], "seconds": 300}
    rows = stage_rows([scored, unscored])
    assert list(rows[0]) == list(rows[1])  # a table of them keeps every value under its own column
    assert rows[1]["held-out ndcg@10"] is None and rows[1]["minutes"] == 5.0 and rows[0]["held-out mrr"] == 0.6382
