"""The Islamic source end to end through `mosaic run --config`: Tafsir-linked verse pairs in place
of PubMed, the held-out and verse tasks scored, the gate deciding on both."""

import json

import pytest
import yaml
from builders import shared_data, tiny_bert
from typer.testing import CliRunner

from cli import app
from mosaic_core.data.islamic import read_quran, tafsir_candidates

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_islamic_config_runs_the_pipeline_on_verse_pairs(tmp_path):
    islamic = shared_data("islamic")
    blocks = (islamic / "tafsir_ibn_kathir_en.grouped.jsonl").read_text().splitlines()
    tafsir = tmp_path / "tafsir.jsonl"
    tafsir.write_text("\n".join(blocks[:60]) + "\n")  # Al-Fatihah and the start of Al-Baqarah
    quran = islamic / "quran_en_sahih.txt"
    pairs, _ = tafsir_candidates(tafsir, read_quran(quran))
    base = str(tiny_bert(tmp_path / "base"))
    stage = {"batch_size": 8, "max_steps": 2, "checkpoint_every": 1, "log_every": 1}
    config = tmp_path / "islamic.yaml"
    config.write_text(yaml.safe_dump({
        "base_model": base, "domain": "Islamic texts",
        "source": {"kind": "islamic", "quran": str(quran), "tafsir": str(tafsir),
                   "threshold": -1.0},  # every candidate kept
        "filter": {"model": base},
        "vocab": {"vocab_size": 300, "heldout_every": 5, "init": "mean"},
        "train": {"heldout_pairs": 8, "validation_pairs": 0,
                  "stages": [{"name": "joint", "kind": "joint", **stage},
                             {"name": "contrastive", "kind": "contrastive", **stage}]},
        "eval_pool": 100}))
    root = tmp_path / "root"

    result = CliRunner().invoke(app, ["run", "--config", str(config), "-d", str(root)])
    assert result.exit_code == 0, result.output
    assert f"filter: kept {len(pairs)} of {len(pairs)} pairs" in result.output
    scores = json.loads((root / "report" / "results.json").read_text())
    assert {row["task"] for row in scores["scores"]["contrastive"]} == {"heldout", "verses"}
    assert set(scores["decision"]["scores"]) == {"heldout", "verses"}  # the gate decides on both
    assert "verse" in (root / "report" / "report.md").read_text()
    # the tiny base ships no MLM head: a head-only warm-up goes before the joint stage
    assert (root / "models" / "1-mlm" / "mlm_head.safetensors").is_file()
    assert (root / "models" / "3-contrastive" / "config.json").is_file()

