import dataclasses
import json

import numpy as np
import pytest
import torch
from builders import stage1_config, tiny_bert
from sentence_transformers import SentenceTransformer

from mosaic_core.modeling.encode import Encoder, pool, read_st_pooling, resolve_precision
from mosaic_core.modeling.refs import OFFLINE_MODEL, resolve_model

TEXTS = ["a cell", "the patient was with the cells of the patient and the cell", "q", "cells in a patient"]


def test_pooling_maths():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert pool(hidden, mask, "mean").tolist() == [[2.0, 3.0]]
    assert pool(hidden, mask, "cls").tolist() == [[1.0, 2.0]]


def test_st_config_is_read():
    assert read_st_pooling(resolve_model(OFFLINE_MODEL)) == ("mean", True)


def test_pooling_config_of_a_saved_stage1_model(tmp_path):
    from mosaic_core.vocab.build import build_expanded_model

    base = tiny_bert(tmp_path / "base")
    build_expanded_model(["the patient cells"] * 40, tmp_path / "out", stage1_config(base, vocab_size=120,
                                                                                   heldout_every=10))
    assert read_st_pooling(str(tmp_path / "out")) == ("mean", False)  # sentence-transformers 6 format
    assert Encoder.load(str(tmp_path / "out"), precision="fp32").encode(["a cell"]).shape == (1, 32)


def test_cls_pooling_config(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    assert read_st_pooling(str(tmp_path)) == ("cls", False)


def test_matches_sentence_transformers_in_input_order(tmp_path):
    base = tiny_bert(tmp_path / "m")
    enc = Encoder.load(str(base), precision="fp32")  # plain HF dir: mean pooling, no normalisation
    ours = enc.encode(TEXTS, batch_size=2)
    ref = SentenceTransformer(str(base), device="cpu").encode(TEXTS, batch_size=2)
    np.testing.assert_allclose(ours, ref, atol=1e-5)
    assert not np.allclose(np.linalg.norm(ours, axis=1), 1.0)
    normed = Encoder.load(str(base), normalize=True, precision="fp32").encode(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(normed, axis=1), 1.0, rtol=1e-5)


def test_bf16_close_to_fp32(tmp_path):
    base = tiny_bert(tmp_path / "m")
    fp32 = Encoder.load(str(base), normalize=True, precision="fp32").encode(TEXTS)
    bf16 = Encoder.load(str(base), normalize=True, precision="bf16").encode(TEXTS)
    assert (fp32 * bf16).sum(1).min() > 0.99


def test_precision_rules():
    assert resolve_precision("fp32", torch.device("cpu")) is None
    assert resolve_precision("bf16", torch.device("cpu")) is torch.bfloat16
    assert resolve_precision("auto", torch.device("cuda")) is torch.bfloat16
    with pytest.raises(ValueError, match="CUDA"):
        resolve_precision("fp16", torch.device("cpu"))


def test_inputs_longer_than_the_models_positions_are_truncated_to_them(tmp_path):
    from transformers import RobertaConfig

    from mosaic_core.modeling.encode import max_positions

    enc = Encoder.load(str(tiny_bert(tmp_path / "m")), max_length=512)  # a 128-position model
    assert enc.max_length == 128 and enc.with_max_length(1000).max_length == 128
    assert enc.with_max_length(64).max_length == 64
    assert enc.with_max_length(1000).encode(["patient " * 400]).shape == (1, 32)  # no position overflow
    assert max_positions(RobertaConfig(max_position_embeddings=514, pad_token_id=1)) == 512


def test_token_budget_batches_and_out_of_memory_retries(tmp_path, caplog):
    base = tiny_bert(tmp_path / "m")
    enc = Encoder.load(str(base), precision="fp32")
    texts = TEXTS * 5
    ref = enc.encode(texts, batch_size=1)
    sizes = []
    forward = enc.model.forward

    def recording(**batch):
        sizes.append(batch["input_ids"].shape)
        return forward(**batch)

    enc.model.forward = recording
    np.testing.assert_allclose(dataclasses.replace(enc, batch_tokens=40).encode(texts), ref, atol=1e-5)
    assert all(n * width <= 40 for n, width in sizes) and sum(n for n, _ in sizes) == len(texts)
    assert max(n for n, _ in sizes) > 2  # short texts share a batch

    def out_of_memory_above_three(**batch):
        if len(batch["input_ids"]) > 3:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return forward(**batch)

    enc.model.forward = out_of_memory_above_three
    np.testing.assert_allclose(enc.encode(texts, batch_size=16), ref, atol=1e-5)
    np.testing.assert_allclose(dataclasses.replace(enc, batch_tokens=400).encode(texts), ref, atol=1e-5)
    assert "retrying with batches of 2 texts" in caplog.text and "tokens" in caplog.text
    enc.model.forward = lambda **batch: (_ for _ in ()).throw(torch.OutOfMemoryError("simulated"))
    with pytest.raises(torch.OutOfMemoryError):
        enc.encode(texts, batch_size=4)
