"""bench/recipe_soup.py's soup: the shared weights averaged, the adapted model's new embedding
rows and folder kept (written with plain tensors here; nothing is trained)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from builders import bench_script


@pytest.fixture(scope="module")
def soup():
    return bench_script("recipe_soup").soup


def _model(folder: Path, rows: int, fill: float) -> Path:
    folder.mkdir(parents=True)
    save_file({"embeddings.word_embeddings.weight": torch.full((rows, 4), fill),
               "encoder.layer.0.weight": torch.full((4, 4), fill),
               "embeddings.position_ids": torch.arange(4)}, str(folder / "model.safetensors"))
    (folder / "tokenizer.json").write_text(f"{{\"rows\": {rows}}}")
    return folder


def test_soup_mixes_shared_weights_and_keeps_new_rows(tmp_path, soup):
    control, adapted = _model(tmp_path / "control", 5, 0.0), _model(tmp_path / "adapted", 7, 1.0)
    out = soup(control, adapted, 0.25, tmp_path / "soup")
    mixed = load_file(str(out / "model.safetensors"))
    words = mixed["embeddings.word_embeddings.weight"]
    assert words.shape == (7, 4)
    assert torch.allclose(words[:5], torch.full((5, 4), 0.25)) and torch.equal(words[5:], torch.ones(2, 4))
    assert torch.allclose(mixed["encoder.layer.0.weight"], torch.full((4, 4), 0.25))
    assert torch.equal(mixed["embeddings.position_ids"], torch.arange(4))
    assert (out / "tokenizer.json").read_text() == '{"rows": 7}'  # the adapted model's tokenizer


def test_soup_refuses_models_that_do_not_share_weights(tmp_path, soup):
    control, adapted = _model(tmp_path / "control", 9, 0.0), _model(tmp_path / "adapted", 7, 1.0)
    with pytest.raises(SystemExit, match="word_embeddings"):
        soup(control, adapted, 0.5, tmp_path / "soup")
