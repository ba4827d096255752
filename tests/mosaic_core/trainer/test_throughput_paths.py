"""The GPU throughput paths, run on the CPU: padding to a multiple of 8 and the compiled encoder
change the shapes and the kernels, never the loss or the weights a stage trains."""

import pytest
import torch
from builders import stage1_config, tiny_bert
from transformers import AutoModel, AutoTokenizer

from mosaic_core.config import StageConfig
from mosaic_core.modeling.dual_encoder import PairCollator, build_model
from mosaic_core.modeling.losses import JointLoss
from mosaic_core.trainer import Hooks, train_stage
from mosaic_core.trainer.build import build_collator
from mosaic_core.trainer.gradcache import joint_backward
from mosaic_core.vocab.build import build_expanded_model

TOPICS = ["cardiomyopathy", "immunotherapy", "hepatocytes", "nephropathy"]
PAIRS = [(f"{t} in the patient {i}", f"the patient with {t} was treated; {t} and cells {i} were {t} studied")
         for i in range(4) for t in TOPICS]


@pytest.fixture(scope="module")
def stage1(tmp_path_factory):
    base = tiny_bert(tmp_path_factory.mktemp("base"))
    out = tmp_path_factory.mktemp("stage1")
    build_expanded_model([t for p in PAIRS for t in p] * 3, out, stage1_config(base, vocab_size=300))
    return out


def test_padding_to_a_multiple_changes_the_shapes_not_the_loss(stage1):
    tok = AutoTokenizer.from_pretrained(stage1)
    plain = PairCollator(tok, None, mlm_probability=0.0)(PAIRS)
    padded = PairCollator(tok, None, mlm_probability=0.0, pad_to_multiple_of=5)(PAIRS)
    for part in ("query_ids", "doc_ids"):
        assert plain[part].shape[1] % 5 and padded[part].shape[1] % 5 == 0  # the test pads both
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
    lengths = type("L", (), {"query": 64, "document": 256})
    assert build_collator(tok, cfg, None, lengths, device=torch.device("cuda")).pad_to_multiple_of == 8
    assert build_collator(tok, cfg, None, lengths, device=torch.device("cpu")).pad_to_multiple_of is None
    told = cfg.model_copy(update={"pad_to_multiple_of": 64})
    assert build_collator(tok, told, None, lengths, device=torch.device("cpu")).pad_to_multiple_of == 64


def test_a_compiled_encoder_trains_the_weights_the_eager_one_does(stage1, tmp_path, caplog, monkeypatch):
    import torch._inductor.config

    monkeypatch.setattr(torch._inductor.config, "fallback_random", True)  # dropout draws as eager's do
    cfg = dict(name="joint", kind="joint", batch_size=8, max_steps=3, lr=1e-3, precision="fp32",
               checkpoint_every=10, log_every=1)
    train_stage(str(stage1), PAIRS, StageConfig(**cfg), tmp_path / "eager", hooks=Hooks(progress=False))
    with caplog.at_level("INFO"):
        train_stage(str(stage1), PAIRS, StageConfig(**cfg, compile=True), tmp_path / "compiled",
                    hooks=Hooks(progress=False))
    assert "encoder is compiled" in caplog.text
    eager, compiled = (AutoModel.from_pretrained(tmp_path / n).state_dict() for n in ("eager", "compiled"))
    assert compiled.keys() == eager.keys()  # no _orig_mod. prefix: the saved model loads as before
    for name, weight in eager.items():
        torch.testing.assert_close(compiled[name], weight, rtol=1e-4, atol=1e-5, msg=name)
