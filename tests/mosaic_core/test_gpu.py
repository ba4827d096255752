"""The CUDA paths: run with ``pytest -m gpu`` on a machine with a GPU (CI has none; the default
``-m 'not slow and not gpu'`` leaves them out, and they skip where CUDA is missing)."""

import json

import pytest
import torch
from builders import stage1_config, tiny_bert
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

from mosaic_core.config import StageConfig
from mosaic_core.modeling.dual_encoder import PairCollator, build_model
from mosaic_core.modeling.losses import JointLoss
from mosaic_core.trainer import Hooks, train_stage
from mosaic_core.trainer.gradcache import joint_backward
from mosaic_core.vocab.build import build_expanded_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PAIRS = [(f"{t} in patient {i}", f"the patient with {t} was treated; {t} and cells {i} were studied")
         for i in range(4) for t in ["cardiomyopathy", "immunotherapy", "hepatocytes", "nephropathy"]]


def test_gradient_cache_on_cuda_equals_the_big_batch_on_cpu(tmp_path):
    path = tiny_bert(tmp_path / "m", mlm_head=True)
    tok = AutoTokenizer.from_pretrained(path)
    domain = torch.tensor(tok.convert_tokens_to_ids(["patient", "cells"]))
    batch = PairCollator(tok, domain, mlm_probability=0.5, generator=torch.Generator().manual_seed(0))(PAIRS)
    loss_fn = JointLoss(alpha=0.3, scale=20.0)
    grads = {}
    for device, chunk in (("cpu", len(PAIRS)), ("cuda", 3)):
        model, _ = build_model(str(path))
        model.to(device).eval()
        joint_backward(model, {k: v.to(device) for k, v in batch.items()}, loss_fn, domain.to(device), chunk)
        grads[device] = {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}
    assert grads["cuda"].keys() == grads["cpu"].keys()
    for name, g in grads["cuda"].items():
        torch.testing.assert_close(g, grads["cpu"][name], rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize("compiled", [False, True])
def test_bf16_joint_stage_on_cuda_learns_keeps_fp32_weights_and_saves_a_loadable_model(tmp_path, compiled):
    stage1 = tmp_path / "stage1"
    build_expanded_model([t for p in PAIRS for t in p] * 3, stage1,
                         stage1_config(tiny_bert(tmp_path / "base"), vocab_size=300))
    cfg = StageConfig(name="joint", kind="joint", batch_size=8, chunk_size=4, max_steps=20, lr=1e-3,
                      precision="bf16", log_every=1, checkpoint_every=100, compile=compiled)  # padded to 8
    result = train_stage(str(stage1), PAIRS, cfg, tmp_path / "out", hooks=Hooks(progress=False))  # device: cuda
    log = [json.loads(line) for line in (tmp_path / "out" / "train_log.jsonl").read_text().splitlines()]
    totals = [r["total"] for r in log]
    assert len(totals) == result.steps == 20 and all(t == t and t < 1e4 for t in totals)
    assert sum(totals[-5:]) < sum(totals[:5])
    assert all(r["mlm"] > 0 for r in log)  # the MLM term was computed on CUDA
    saved = load_file(str(tmp_path / "out" / "model.safetensors"))
    before = load_file(str(stage1 / "model.safetensors"))
    assert {v.dtype for v in saved.values()} == {torch.float32}
    assert any(not torch.equal(saved[k], before[k]) for k in before)
    emb = SentenceTransformer(str(tmp_path / "out"), device="cuda").encode(["the patient with nephropathy"])
    assert emb.shape == (1, 32) and torch.isfinite(torch.from_numpy(emb)).all()
