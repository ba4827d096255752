"""A training stage is a function of its inputs (issue 42): the same model, pairs, config and seed
give byte-identical weights, and stage.json records what else they depend on."""

import hashlib
import json

from builders import stage1_config, tiny_bert

from mosaic_core.config import StageConfig
from mosaic_core.modeling.modeldir import HEAD_WEIGHTS
from mosaic_core.trainer import Hooks, train_stage
from mosaic_core.vocab.build import build_expanded_model

TOPICS = ["cardiomyopathy", "immunotherapy", "hepatocytes", "nephropathy", "angiogenesis", "leukocytes"]
PAIRS = [(f"{t} in the patient {i}", f"the patient with {t} was treated; {t} and cells {i} were studied")
         for i in range(4) for t in TOPICS]


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_stage_twice_gives_byte_identical_weights(tmp_path):
    base = tiny_bert(tmp_path / "base")
    stage1 = tmp_path / "stage1"
    build_expanded_model([t for p in PAIRS for t in p] * 3, stage1, stage1_config(base, vocab_size=300))
    cfg = StageConfig(name="joint", kind="joint", batch_size=8, chunk_size=4, max_steps=4, lr=1e-3,
                      precision="fp32", checkpoint_every=2, log_every=1, seed=7)
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:  # dropout, masks and batch order all draw: each from the seed
        train_stage(str(stage1), PAIRS, cfg, out, fingerprint="f", hooks=Hooks(progress=False))
    for name in ("model.safetensors", HEAD_WEIGHTS):
        assert digest(outs[0] / name) == digest(outs[1] / name), name
    record = json.loads((outs[0] / "stage.json").read_text())
    assert record["seed"] == 7
    assert {"torch", "transformers", "tokenizers", "sentence-transformers"} <= set(record["runtime"])
    assert record["runtime"]["torch_threads"] >= 1
