import json
import math

import pytest
import torch
from builders import stage1_config, tiny_bert
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer

from mosaic_core.config import StageConfig, TrainConfig
from mosaic_core.modeling.dual_encoder import PairCollator, build_model
from mosaic_core.modeling.losses import JointLoss
from mosaic_core.modeling.modeldir import HEAD_WEIGHTS, read_domain_ids
from mosaic_core.trainer import (
    BatchPlan,
    Hooks,
    InjectedFailure,
    PairSet,
    StageInputError,
    fail_after,
    frequency_entropy,
    train_stage,
)
from mosaic_core.trainer.build import Lengths, build_collator
from mosaic_core.trainer.gradcache import joint_backward
from mosaic_core.trainer.heldout import RetrievalProbe
from mosaic_core.vocab.build import build_expanded_model

TOPICS = ["cardiomyopathy", "immunotherapy", "hepatocytes", "nephropathy", "angiogenesis", "leukocytes",
          "thrombosis", "neuropathy"]
PAIRS = [(f"{t} in the patient {i}", f"the patient with {t} was treated; {t} and cells {i} were {t} studied")
         for i in range(3) for t in TOPICS]


@pytest.fixture(scope="module")
def stage1(tmp_path_factory):
    base = tiny_bert(tmp_path_factory.mktemp("base"))
    out = tmp_path_factory.mktemp("stage1")
    build_expanded_model([t for p in PAIRS for t in p] * 3, out, stage1_config(base, vocab_size=300))
    assert read_domain_ids(str(out)) is not None
    return out


def stage(**kw) -> StageConfig:
    defaults = dict(name="joint", kind="joint", batch_size=8, chunk_size=3, max_steps=5, lr=1e-3, precision="fp32",
                    checkpoint_every=2, log_every=1)
    return StageConfig(**{**defaults, **kw})


def quiet() -> Hooks:
    return Hooks(progress=False)


def crash(step: int) -> Hooks:
    return Hooks(after_step=[fail_after(step)], progress=False)


def weights(path) -> dict[str, torch.Tensor]:
    return AutoModel.from_pretrained(path).state_dict()


def test_resume_after_a_crash_reproduces_the_uninterrupted_run(stage1, tmp_path):
    cfg = stage()
    full = train_stage(str(stage1), PAIRS, cfg, tmp_path / "full", fingerprint="f", hooks=quiet())
    with pytest.raises(InjectedFailure):
        train_stage(str(stage1), PAIRS, cfg, tmp_path / "crash", fingerprint="f", hooks=crash(3))
    assert (tmp_path / "crash" / "checkpoints" / "step-00000002").is_dir()
    resumed = train_stage(str(stage1), PAIRS, cfg, tmp_path / "crash", fingerprint="f", hooks=quiet())
    assert resumed.resumed_from == 2 and resumed.steps == full.steps == 5
    a, b = weights(tmp_path / "full"), weights(tmp_path / "crash")
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-6, msg=name)
    head_a, head_b = load_file(str(tmp_path / "full" / HEAD_WEIGHTS)), load_file(str(tmp_path / "crash" / HEAD_WEIGHTS))
    for name in head_a:
        torch.testing.assert_close(head_b[name], head_a[name], rtol=0, atol=1e-6, msg=name)
    log_full = [json.loads(x) for x in (tmp_path / "full" / "train_log.jsonl").read_text().splitlines()]
    log_resumed = [json.loads(x) for x in (tmp_path / "crash" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log_resumed] == [r["step"] for r in log_full] == [1, 2, 3, 4, 5]
    assert log_resumed[-1]["total"] == pytest.approx(log_full[-1]["total"], rel=1e-5)
    assert not (tmp_path / "crash" / "checkpoints").exists()  # superseded by the saved model


def test_checkpoint_for_another_config_is_not_resumed(stage1, tmp_path):
    with pytest.raises(InjectedFailure):
        train_stage(str(stage1), PAIRS, stage(), tmp_path / "s", fingerprint="old", hooks=crash(2))
    result = train_stage(str(stage1), PAIRS, stage(), tmp_path / "s", fingerprint="new", hooks=quiet())
    assert result.resumed_from is None


def test_saved_stage_loads_everywhere_and_carries_head_and_vocabulary(stage1, tmp_path):
    out = tmp_path / "joint"
    probe = RetrievalProbe.from_pairs(PAIRS[:20], PAIRS[20:], pool=0)
    result = train_stage(str(stage1), PAIRS[:20], stage(max_steps=3), out, validation=probe, hooks=quiet())
    assert result.evals and 0.0 <= result.evals[-1]["recall@1"] <= 1.0 and result.evals[-1]["n"] == 4
    st = SentenceTransformer(str(out), device="cpu")
    emb = st.encode(["cardiomyopathy in the patient"])
    assert emb.shape == (1, 32)
    assert torch.equal(read_domain_ids(str(out)), read_domain_ids(str(stage1)))
    model, from_checkpoint = build_model(str(out))
    assert from_checkpoint
    saved = load_file(str(out / HEAD_WEIGHTS))
    torch.testing.assert_close(model.head.dense.weight, saved["dense.weight"])
    # The training changed the encoder and the head (the joint stage trains both).
    before, _ = build_model(str(stage1))
    assert not torch.equal(model.encoder.get_input_embeddings().weight, before.encoder.get_input_embeddings().weight)
    assert not torch.equal(model.head.dense.weight, before.head.dense.weight)
    assert json.loads((out / "stage.json").read_text())["result"]["steps"] == 3


def test_mlm_warmup_trains_only_domain_rows_and_head_and_lowers_the_loss(stage1, tmp_path):
    cfg = stage(name="mlm", kind="mlm", lr=5e-3, max_steps=25, mlm_probability=0.5, warmup_ratio=0.0)
    result = train_stage(str(stage1), PAIRS, cfg, tmp_path / "mlm", hooks=quiet())
    log = [json.loads(x) for x in (tmp_path / "mlm" / "train_log.jsonl").read_text().splitlines()]
    first, last = sum(r["mlm"] for r in log[:5]) / 5, sum(r["mlm"] for r in log[-5:]) / 5
    assert last < first - 0.3, (first, last)
    assert all(r["contrastive"] == 0.0 for r in log)
    before, after = weights(stage1), weights(tmp_path / "mlm")
    emb = "embeddings.word_embeddings.weight"
    domain = read_domain_ids(str(stage1))
    old = torch.ones(before[emb].shape[0], dtype=torch.bool)
    old[domain] = False
    assert torch.equal(after[emb][old], before[emb][old])  # non-domain rows bit-identical
    assert not torch.equal(after[emb][domain], before[emb][domain])
    for name in before:
        if name != emb:
            assert torch.equal(after[name], before[name]), name  # encoder frozen
    assert result.domain_vocab == len(domain)


def test_head_only_warmup_leaves_every_encoder_weight_and_lowers_the_loss(stage1, tmp_path):
    cfg = stage(name="mlm", kind="mlm", lr=5e-2, max_steps=50, mlm_probability=0.5, warmup_ratio=0.0,
                mlm_rows=False)
    train_stage(str(stage1), PAIRS, cfg, tmp_path / "mlm", hooks=quiet())
    log = [json.loads(x) for x in (tmp_path / "mlm" / "train_log.jsonl").read_text().splitlines()]
    # |V_D| = 10 here (ln 10 = 2.30): the head alone moves the loss by a tenth in 50 steps.
    assert sum(r["mlm"] for r in log[-5:]) / 5 < sum(r["mlm"] for r in log[:5]) / 5 - 0.15
    before, after = weights(stage1), weights(tmp_path / "mlm")
    for name in before:
        assert torch.equal(after[name], before[name]), name  # embedding rows included
    head_before, _ = build_model(str(stage1))
    head_after, _ = build_model(str(tmp_path / "mlm"))
    assert not torch.equal(head_after.head.dense.weight, head_before.head.dense.weight)
    assert not torch.equal(head_after.head.bias, head_before.head.bias)


def test_mlm_warmup_stops_at_the_first_step_its_loss_is_below_target_and_resumes_to_the_same_step(stage1, tmp_path):
    import math
    cfg = stage(name="mlm", kind="mlm", lr=5e-3, max_steps=16, mlm_probability=0.5, warmup_ratio=0.0,
                checkpoint_every=1, schedule="constant")
    uncapped = train_stage(str(stage1), PAIRS, cfg, tmp_path / "uncapped", hooks=quiet())  # logs every step
    assert uncapped.stop_reason == "steps" and uncapped.steps == 16 and uncapped.mlm_target_loss is None
    mlm = [json.loads(x)["mlm"] for x in (tmp_path / "uncapped" / "train_log.jsonl").read_text().splitlines()]
    means = {s: (mlm[s - 2] + mlm[s - 1]) / 2 for s in range(2, 17)}  # the two-step window ending at step s
    # A target the run first crosses after a few steps: just under the best window mean of steps 2-5.
    target = min(means[s] for s in range(2, 6)) - 1e-3
    expected = next((s for s in range(6, 17) if means[s] < target), None)
    assert expected is not None, means  # the loss kept falling
    fraction = target / math.log(uncapped.domain_vocab)
    capped = cfg.model_copy(update={"mlm_target": fraction, "log_every": 2})  # the window: 2 steps
    with pytest.raises(InjectedFailure):  # a crash between two steps of the window
        train_stage(str(stage1), PAIRS, capped, tmp_path / "target", fingerprint="t", hooks=crash(expected - 1))
    result = train_stage(str(stage1), PAIRS, capped, tmp_path / "target", fingerprint="t", hooks=quiet())
    assert result.resumed_from == expected - 1  # the window restored from the checkpoint holds its step
    assert (result.stop_reason, result.steps) == ("mlm_target", expected)
    assert result.mlm_target_loss == pytest.approx(target)
    log = [json.loads(x) for x in (tmp_path / "target" / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == expected  # the stop step is logged even off the log_every grid
    assert json.loads((tmp_path / "target" / "stage.json").read_text())["result"]["stop_reason"] == "mlm_target"


def test_frequency_entropy_counts_domain_tokens_only(stage1):
    import math

    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(str(stage1))
    domain = read_domain_ids(str(stage1))
    words = ["immunotherapy", "cardiomyopathy"]
    ids = [tokenizer.convert_tokens_to_ids(w) for w in words]
    assert all(i in domain.tolist() for i in ids), "both words are single domain tokens after stage 1"
    docs = ["the immunotherapy and the immunotherapy", "of cardiomyopathy"]  # 'the', 'and', 'of' are base tokens
    expected = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    assert frequency_entropy(tokenizer, docs, domain, 64) == pytest.approx(expected)
    assert frequency_entropy(tokenizer, docs[:1], domain, 64) == pytest.approx(0.0)


def test_a_warmup_target_short_of_its_steps_is_reported(stage1, tmp_path, caplog):
    import math
    cfg = stage(name="mlm", kind="mlm", max_steps=3, mlm_target=0.01)
    result = train_stage(str(stage1), PAIRS, cfg, tmp_path / "mlm", hooks=quiet())
    assert (result.stop_reason, result.steps) == ("steps", 3)
    assert "not below its target" in caplog.text
    assert 0 < result.mlm_frequency_entropy < math.log(result.domain_vocab)


def test_contrastive_stage_leaves_the_head_alone_and_never_masks(stage1, tmp_path, monkeypatch):
    import mosaic_core.trainer.loop as train

    seen = []
    original = train.joint_backward

    def spy(model, batch, *args, **kw):
        seen.append((batch["labels"] != -100).sum().item())
        return original(model, batch, *args, **kw)

    train_stage(str(stage1), PAIRS, stage(max_steps=1), tmp_path / "joint", hooks=quiet())  # has a head now
    monkeypatch.setattr(train, "joint_backward", spy)
    train_stage(str(tmp_path / "joint"), PAIRS, stage(name="c", kind="contrastive", max_steps=2), tmp_path / "c",
                hooks=quiet())
    assert seen == [0, 0]
    before, _ = build_model(str(tmp_path / "joint"))
    after, _ = build_model(str(tmp_path / "c"))
    assert torch.equal(before.head.dense.weight, after.head.dense.weight)


def test_domain_masking_needs_stage1_output(tmp_path, caplog):
    base = tiny_bert(tmp_path / "base")  # no MLM head either
    with pytest.raises(StageInputError, match="mosaic vocab"):
        train_stage(str(base), PAIRS, stage(), tmp_path / "out", hooks=quiet())
    # All-token MLM and contrastive-only run on any model; only the stage that trains the
    # missing head says it starts fresh.
    train_stage(str(base), PAIRS, stage(kind="contrastive", max_steps=1), tmp_path / "c", hooks=quiet())
    assert "no MLM head" not in caplog.text
    train_stage(str(base), PAIRS, stage(mlm_tokens="all", max_steps=1), tmp_path / "all", hooks=quiet())
    assert "no MLM head: stage joint trains the head's transform from scratch" in caplog.text


def test_a_margin_mse_stage_needs_examples_with_teacher_margins(tmp_path):
    base = tiny_bert(tmp_path / "base")
    with_negatives = [(q, d, PAIRS[(i + 1) % len(PAIRS)][1]) for i, (q, d) in enumerate(PAIRS)]
    gpl = stage(kind="contrastive", max_steps=1, hard_negatives=1, objective="margin_mse", teacher="ce")
    with pytest.raises(StageInputError, match="carry no teacher margins"):
        train_stage(str(base), with_negatives, gpl, tmp_path / "out", hooks=quiet())


def test_batch_plan_is_a_function_of_seed_and_step():
    plan = BatchPlan(10, 4, seed=1)
    first_epoch = [plan.indices(g) for g in range(2)]
    assert plan.per_epoch == 2 and all(len(b) == 4 for b in first_epoch)
    assert len(set(first_epoch[0]) | set(first_epoch[1])) == 8
    assert BatchPlan(10, 4, seed=1).indices(1) == first_epoch[1]
    assert plan.indices(2) != first_epoch[0]  # a new epoch reshuffles


def test_batches_come_in_order_and_the_same_whatever_the_collation_threads(stage1, tmp_path):
    import random
    import time

    from mosaic_core.trainer.data import prefetched

    plan = BatchPlan(10, 3, seed=1)  # three batches an epoch: the threads cross epochs

    def make(g):
        time.sleep(random.random() / 50)  # threads finish out of order
        return {"g": g, "rows": plan.indices(g)}

    one = list(prefetched(make, 2, 20))
    assert [b["g"] for b in one] == list(range(2, 20))
    assert list(prefetched(make, 2, 20, threads=4)) == one
    train_stage(str(stage1), PAIRS, stage(collate_threads=1), tmp_path / "one", hooks=quiet())
    train_stage(str(stage1), PAIRS, stage(collate_threads=3), tmp_path / "three", hooks=quiet())
    a, b = weights(tmp_path / "one"), weights(tmp_path / "three")
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_validation_retrieval_against_naive_ranks(stage1):
    from mosaic_core.trainer.build import build_parts
    from mosaic_core.trainer.stage import validation_scorer

    probe = RetrievalProbe.from_pairs(PAIRS[:16], PAIRS[16:], pool=6)
    assert len(probe.queries) == 8 and len(probe.corpus) == 14  # 8 own documents + 6 distractors
    parts = build_parts(stage(), str(stage1), str(stage1), PairSet.of(PAIRS))
    m = validation_scorer(parts, probe)(parts.model)
    st = SentenceTransformer(str(stage1), device="cpu")
    q = torch.tensor(st.encode(probe.queries, normalize_embeddings=True))
    d = torch.tensor(st.encode(probe.corpus, normalize_embeddings=True))
    ranks = [1 + sum(float(q[i] @ d[j]) > float(q[i] @ d[probe.relevant[i]]) + 1e-6 for j in range(len(d)))
             for i in range(len(q))]
    assert m["mrr"] == pytest.approx(sum(1 / r for r in ranks) / len(ranks), abs=0.02)
    ndcg = sum(1 / math.log2(r + 1) if r <= 10 else 0 for r in ranks) / len(ranks)
    assert m["ndcg@10"] == pytest.approx(ndcg, abs=0.02) and m["n"] == 8


def test_presets_and_validation():
    assert [s.kind for s in TrainConfig.preset("warmup").stages] == ["mlm", "joint", "contrastive"]
    assert [s.kind for s in TrainConfig.preset("reversed").stages] == ["contrastive", "joint"]
    assert TrainConfig.preset("all-token").stages[0].mlm_tokens == "all"
    assert TrainConfig.preset("paper", {"batch_size": 16}).stages[1].batch_size == 16
    with pytest.raises(ValueError, match="unknown preset"):
        TrainConfig.preset("nope")
    with pytest.raises(ValueError, match="unique"):
        TrainConfig(stages=(stage(), stage()))
    with pytest.raises(ValueError, match="mlm_target belongs to the mlm warm-up"):
        stage(mlm_target=0.8)
    with pytest.raises(ValueError, match="mlm_rows belongs to the mlm warm-up"):
        stage(kind="contrastive", mlm_rows=False)
    assert TrainConfig.preset("warmup").stages[0].mlm_target == 0.85


@pytest.mark.parametrize(("kind", "alpha", "shown"), [
    ("joint", 0.3, ["mlm", "contrastive"]),
    ("joint", 0.0, ["contrastive"]),
    ("contrastive", 0.3, ["contrastive"]),
    ("mlm", 0.3, ["mlm"]),
])
def test_the_step_log_names_only_the_terms_the_stage_computes(stage1, tmp_path, caplog, kind, alpha, shown):
    caplog.set_level("INFO", logger="mosaic_core.trainer.loop")
    train_stage(str(stage1), PAIRS, stage(name=kind, kind=kind, alpha=alpha, max_steps=1), tmp_path / kind,
                hooks=quiet())
    line = next(r.getMessage() for r in caplog.records if "step 1/1" in r.getMessage())
    logged = [part.split()[0] for part in line.split("(")[1].split(")")[0].split(", ")]  # "(mlm 9.1, contrastive 0.4)"
    assert logged == shown, line


def scripted(*scores: float) -> Hooks:
    """Validation that returns the given NDCG@10 values in turn."""
    it = iter(scores)
    return Hooks(evaluate=lambda model: {"ndcg@10": next(it), "n": 1}, progress=False)


def test_the_stage_output_is_its_best_validated_model_not_its_last(stage1, tmp_path):
    flat = dict(schedule="constant", warmup_ratio=0.0, eval_every=2)
    result = train_stage(str(stage1), PAIRS, stage(max_steps=4, **flat), tmp_path / "best",
                         hooks=scripted(0.5, 0.3, 0.1))
    assert [e["step"] for e in result.evals] == [0, 2, 4] and result.best_step == 2
    record = json.loads((tmp_path / "best" / "stage.json").read_text())
    assert record["result"]["best_step"] == 2 and record["result"]["steps"] == 4
    two_steps = train_stage(str(stage1), PAIRS, stage(max_steps=2, keep_best=False, **flat), tmp_path / "two",
                            hooks=quiet())
    assert two_steps.best_step is None
    a, b = weights(tmp_path / "best"), weights(tmp_path / "two")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)
    assert not (tmp_path / "best" / "checkpoints").exists()


def test_ties_go_to_the_later_step_and_the_input_model_can_win(stage1, tmp_path):
    flat = dict(schedule="constant", warmup_ratio=0.0, eval_every=2, max_steps=4)
    tied = train_stage(str(stage1), PAIRS, stage(**flat), tmp_path / "tied", hooks=scripted(0.5, 0.5, 0.1))
    assert tied.best_step == 4
    # Within best_tolerance (0.005) of the top score is a tie too, judged against the top, not the kept one.
    near = train_stage(str(stage1), PAIRS, stage(**flat), tmp_path / "near", hooks=scripted(0.5, 0.496, 0.1))
    assert near.best_step == 4
    below = train_stage(str(stage1), PAIRS, stage(**{**flat, "max_steps": 6}), tmp_path / "below",
                        hooks=scripted(0.5, 0.497, 0.494, 0.1))
    assert below.best_step == 4  # 0.494 is within 0.005 of the kept 0.497 but not of the top 0.5
    # The input model, scored after the last step, replaces the kept model only when it is better by more
    # than the tolerance.
    level = train_stage(str(stage1), PAIRS, stage(**flat), tmp_path / "level", hooks=scripted(0.497, 0.494, 0.498))
    assert level.best_step == 4 and [e["step"] for e in level.evals] == [0, 2, 4]
    strict = train_stage(str(stage1), PAIRS, stage(best_tolerance=0.0, **flat), tmp_path / "strict",
                         hooks=scripted(0.5, 0.496, 0.1))
    assert strict.best_step == 2
    kept_input = train_stage(str(stage1), PAIRS, stage(**flat), tmp_path / "input", hooks=scripted(0.5, 0.3, 0.9))
    assert kept_input.best_step == 0
    a, b = weights(stage1), weights(tmp_path / "input")
    for name in a:
        assert torch.equal(a[name], b[name]), name


# The GPU throughput paths, run on the CPU: padding to a multiple and the compiled encoder change
# the shapes and the kernels, never the loss or the weights a stage trains.

def test_padding_to_a_multiple_changes_the_shapes_not_the_loss(stage1):
    tok = AutoTokenizer.from_pretrained(stage1)
    plain = PairCollator(tok, None, mlm_probability=0.0)(PAIRS)
    multiple = max(plain["query_ids"].shape[1], plain["doc_ids"].shape[1]) + 1  # pads both
    padded = PairCollator(tok, None, mlm_probability=0.0, pad_to_multiple_of=multiple)(PAIRS)
    assert padded["query_ids"].shape[1] == padded["doc_ids"].shape[1] == multiple
    assert torch.equal(padded["doc_mask"].sum(1), plain["doc_mask"].sum(1))
    losses = []
    for batch in (plain, padded):
        model, _ = build_model(str(stage1))
        model.eval()
        losses.append(joint_backward(model, batch, JointLoss(alpha=0.0, scale=20.0), None, len(PAIRS),
                                     use_mlm=False)["contrastive"])
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)


def test_a_stage_pads_to_8_on_a_gpu_unless_told(stage1):
    tok = AutoTokenizer.from_pretrained(stage1)
    cfg = StageConfig(name="c", kind="contrastive")
    lengths = Lengths(query=64, document=256)
    assert build_collator(tok, cfg, None, lengths, device=torch.device("cuda")).pad_to_multiple_of == 8
    assert build_collator(tok, cfg, None, lengths, device=torch.device("cpu")).pad_to_multiple_of is None
    told = cfg.model_copy(update={"pad_to_multiple_of": 64})
    assert build_collator(tok, told, None, lengths, device=torch.device("cpu")).pad_to_multiple_of == 64


def test_a_compiled_encoder_trains_the_weights_the_eager_one_does(stage1, tmp_path, caplog, monkeypatch):
    import torch._inductor.config

    monkeypatch.setattr(torch._inductor.config, "fallback_random", True)  # dropout draws as eager's do
    train_stage(str(stage1), PAIRS, stage(chunk_size=None, max_steps=3), tmp_path / "eager", hooks=quiet())
    with caplog.at_level("INFO"):
        train_stage(str(stage1), PAIRS, stage(chunk_size=None, max_steps=3, compile=True), tmp_path / "compiled",
                    hooks=quiet())
    assert "encoder is compiled" in caplog.text
    eager, compiled = (AutoModel.from_pretrained(tmp_path / n).state_dict() for n in ("eager", "compiled"))
    assert compiled.keys() == eager.keys()  # no _orig_mod. prefix: the saved model loads as before
    for name, weight in eager.items():
        torch.testing.assert_close(compiled[name], weight, rtol=1e-4, atol=1e-5, msg=name)
