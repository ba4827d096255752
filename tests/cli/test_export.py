"""``mosaic export``: writes a verified export, refuses with exit 1 and writes nothing, clear input errors."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from builders import TINY_WORDS, tiny_bert  # noqa: E402

from cli import app  # noqa: E402

runner = CliRunner()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("cli-export") / "bert", words=[*TINY_WORDS, "metformin"])


def test_export_writes_a_verified_onnx_model(model_dir, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("metformin in the cell\nthe patient\n")
    result = runner.invoke(app, ["export", str(model_dir), "--to", "onnx", "--out", str(tmp_path / "out"),
                                 "--texts", str(texts)])
    assert result.exit_code == 0, result.output
    assert "cosine to PyTorch" in result.output
    assert (tmp_path / "out" / "onnx" / "model.onnx").is_file()


def test_refused_export_exits_1_and_writes_nothing(model_dir, tmp_path, monkeypatch):
    from mosaic_core import export

    def refuse(*args, **kwargs):  # what export_model raises when the verification fails (tested there)
        raise export.ExportRefused("onnx export refused, nothing written: mean cosine 0.5 < 0.99")

    monkeypatch.setattr(export, "export_model", refuse)
    result = runner.invoke(app, ["export", str(model_dir), "--to", "onnx", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "refused" in result.output and "mean cosine 0.5" in result.output


def test_input_errors_are_clear(model_dir, tmp_path):
    bad_kind = runner.invoke(app, ["export", str(model_dir), "--to", "tflite", "--out", str(tmp_path / "o")])
    assert bad_kind.exit_code == 2 and "tflite" in bad_kind.output
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x.txt").write_text("mine")
    used = runner.invoke(app, ["export", str(model_dir), "--to", "onnx", "--out", str(tmp_path / "used")])
    assert used.exit_code == 2 and "not an earlier export" in used.output
    no_texts = runner.invoke(app, ["export", str(model_dir), "--to", "onnx", "--out", str(tmp_path / "o"),
                                   "--texts", str(tmp_path / "missing.txt")])
    assert no_texts.exit_code == 2 and "no such file" in " ".join(no_texts.output.split())


def test_missing_extra_says_how_to_install(model_dir, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "model2vec", None)  # as if not installed: importing it raises ImportError
    result = runner.invoke(app, ["export", str(model_dir), "--to", "static", "--out", str(tmp_path / "s")])
    assert result.exit_code == 2 and "pip install -e '.[export]'" in " ".join(result.output.split())
