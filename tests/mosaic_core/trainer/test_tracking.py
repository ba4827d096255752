"""TensorBoard event files of a tiny stage and of stage 1's distillation, read back as TensorBoard reads them."""

import math

import pytest
from builders import stage1_config, tiny_bert

from mosaic_core.config import DistillConfig, StageConfig
from mosaic_core.modeling.tracking import TB_DIR
from mosaic_core.trainer import Hooks, train_stage
from mosaic_core.trainer.heldout import RetrievalProbe
from mosaic_core.trainer.tracking import MLM_BASELINE, record_scalars
from mosaic_core.vocab.build import build_expanded_model

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

TOPICS = ["cardiomyopathy", "immunotherapy", "hepatocytes", "nephropathy", "angiogenesis", "leukocytes"]
PAIRS = [(f"{t} in the patient {i}", f"the patient with {t} was treated; {t} and cells {i} were {t} studied")
         for i in range(4) for t in TOPICS]


def scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.fixture(scope="module")
def stage1(tmp_path_factory):
    base = tiny_bert(tmp_path_factory.mktemp("base"))
    out = tmp_path_factory.mktemp("stage1")
    texts = [t for p in PAIRS for t in p] * 3
    build_expanded_model(texts, out, stage1_config(base, vocab_size=300, init="distill", heldout_every=4,
                                                   distill=DistillConfig(max_steps=6, eval_every=2, batch_size=4,
                                                                         patience=10)))
    return out


def test_record_scalars_tags_every_loss_term_rate_and_validation_score():
    record = {"step": 3, "total": 2.0, "mlm": 1.5, "contrastive": 0.5, "matryoshka_64": 0.7, "grad_norm": 0.9,
              "lr": 1e-3, "lrs": [1e-3, 2e-3], "pairs_per_s": 10.0, "tokens_per_s": 500.0, "gpu_peak_gib": 1.0,
              "total_steps": 9, "eval": {"step": 3, "ndcg@10": 0.4, "n": 8}}
    assert record_scalars(record) == {
        "loss/total": 2.0, "loss/mlm": 1.5, "loss/contrastive": 0.5, "loss/matryoshka_64": 0.7,
        "train/grad_norm": 0.9, "train/lr": 1e-3, "train/lr_group0": 1e-3, "train/lr_group1": 2e-3,
        "speed/pairs_per_s": 10.0, "speed/tokens_per_s": 500.0, "gpu/peak_gib": 1.0, "val/ndcg@10": 0.4}


def test_a_tiny_stage_writes_every_series_with_its_steps(stage1, tmp_path):
    cfg = StageConfig(name="joint", kind="joint", batch_size=8, chunk_size=4, max_steps=4, lr=1e-3, precision="fp32",
                      checkpoint_every=2, log_every=1, eval_every=2)
    train, val = PAIRS[:18], PAIRS[18:]
    probe = RetrievalProbe.from_pairs(train, val, 50)
    result = train_stage(str(stage1), train, cfg, tmp_path / "joint", probe, "f", Hooks(progress=False))
    series = scalars(tmp_path / "joint" / TB_DIR)
    steps = [1, 2, 3, 4]
    for tag in ("loss/total", "loss/mlm", "loss/contrastive", "train/lr", "train/grad_norm", "speed/pairs_per_s",
                "speed/tokens_per_s", MLM_BASELINE):
        assert [s for s, _ in series[tag]] == steps, tag
    # every eval_every steps, then the input model (as step 0) after the last step
    assert [s for s, _ in series["val/ndcg@10"]] == [2, 4, 0]
    baseline = result.mlm_frequency_entropy
    assert 0 < baseline < math.log(result.domain_vocab)
    assert [v for _, v in series[MLM_BASELINE]] == pytest.approx([baseline] * 4)
    assert all(v > 0 for _, v in series["speed/tokens_per_s"])


def test_a_resumed_stage_keeps_one_point_per_step(stage1, tmp_path):
    from mosaic_core.trainer import InjectedFailure, fail_after

    cfg = StageConfig(name="contrastive", kind="contrastive", batch_size=8, max_steps=5, lr=1e-3, precision="fp32",
                      checkpoint_every=2, log_every=1)
    with pytest.raises(InjectedFailure):
        train_stage(str(stage1), PAIRS, cfg, tmp_path / "c", fingerprint="f",
                    hooks=Hooks(after_step=[fail_after(3)], progress=False))
    train_stage(str(stage1), PAIRS, cfg, tmp_path / "c", fingerprint="f", hooks=Hooks(progress=False))
    series = scalars(tmp_path / "c" / TB_DIR)
    assert [s for s, _ in series["loss/contrastive"]] == [1, 2, 3, 4, 5]
    assert "loss/mlm" not in series and MLM_BASELINE not in series


def test_stage1_distillation_writes_its_losses(stage1):
    series = scalars(stage1 / TB_DIR)
    assert [s for s, _ in series["distill/heldout_loss"]] == [0, 2, 4, 6]
    assert [s for s, _ in series["distill/train_loss"]] == [2, 4, 6]
    assert [s for s, _ in series["distill/lr"]] == [2, 4, 6]
