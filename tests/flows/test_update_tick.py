"""Update ticks (issue 66): a rerun that finds new pairs beside the live models trains them on the
new pairs alone, keeps every token id, continues the control, and says so; nothing new: nothing
trained; ``full``: everything rebuilt."""

import json
import math
from pathlib import Path

import pytest
import torch
from builders import tiny_bert
from safetensors.torch import load_file
from transformers import AutoTokenizer
from typer.testing import CliRunner

from cli import app
from flows.pipeline import mosaic_pipeline
from mosaic_core.config import PipelineConfig
from mosaic_core.modeling.modeldir import read_domain_ids, read_stage_record
from mosaic_core.trainer.heldout import content_hashes
from storage.ticks import read_ticks, trained_pairs
from tasks.continual import prepare_tick
from tasks.evaluate import READERS

pytestmark = pytest.mark.usefixtures("prefect_harness")
DRUGS = ["aspirin", "heparin", "insulin", "warfarin", "metformin", "ibuprofen"]
DISEASES = ["asthma", "stroke", "sepsis", "anaemia", "obesity", "migraine", "gout", "lupus", "rickets", "scurvy"]


def pairs_file(path: Path, first: int, n: int, word: str | None = None) -> None:
    rows = []
    for i in range(first, first + n):
        drug, disease = word or DRUGS[i % len(DRUGS)], DISEASES[i // len(DRUGS) % len(DISEASES)]
        rows.append({"query": f"{drug} for {disease} in cohort {i}",
                     "document": f"Patients with {disease} were given {drug} in cohort {i}; {drug} reduced "
                                 f"{disease} events over {2 + i % 5} years."})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def config(folder: Path, base: Path) -> PipelineConfig:
    stage = {"batch_size": 4, "max_steps": 3, "checkpoint_every": 1, "log_every": 1}
    return PipelineConfig.load({
        "base_model": str(base), "source": {"kind": "pairs", "path": str(folder / "*.jsonl")},
        "filter": {"model": str(base), "mode": "threshold", "threshold": -1.0},
        "vocab": {"vocab_size": 400, "heldout_every": 5, "min_count": 4, "prune": 0.0},
        "train": {"heldout_pairs": 6, "validation_pairs": 6,
                  "stages": [{"name": "joint", "kind": "joint", **stage},
                             {"name": "contrastive", "kind": "contrastive", **stage}]},
        "eval_pool": 50, "update": {"epochs": 0.25, "split_drift": 0.9}})  # the new word: a drift


def rows(model: str) -> torch.Tensor:
    return load_file(str(Path(model) / "model.safetensors"))["embeddings.word_embeddings.weight"]


def test_new_pairs_are_an_update_tick_that_keeps_every_token_and_trains_on_them_alone(tmp_path):
    folder, root = tmp_path / "pairs", str(tmp_path / "root")
    folder.mkdir()
    pairs_file(folder / "a.jsonl", 0, 60)
    cfg = config(folder, tiny_bert(tmp_path / "base"))

    first = mosaic_pipeline(cfg, root)
    assert first["tick"]["kind"] == "full" and first["tick"]["reason"] == "the data root's first run"
    [full] = read_ticks(root)
    assert full["kind"] == "full" and full["pairs_trained"] == first["stages"][0]["pairs"]
    assert len(trained_pairs(root)) == full["pairs_trained"]
    live = full["models"]

    pairs_file(folder / "b.jsonl", 1000, 10, word="zorblaxin")  # a new word, in every new pair
    second = mosaic_pipeline(cfg, root)
    tick = second["tick"]
    assert tick["kind"] == "update" and tick["tick"] == 2, tick["reason"]
    assert 0 < tick["new"] <= 10 and tick["replay"] == tick["new"]  # replay 1.0: one earlier pair per new one
    assert "This run:** tick 2, update tick" in Path(second["report"]["markdown"]).read_text()
    record = read_ticks(root)[-1]
    assert record["kind"] == "update" and record["pairs_trained"] == tick["new"] + tick["replay"]
    steps = min(3, math.ceil(0.25 * record["pairs_trained"] / 4))  # the tick's pairs' budget, at most max_steps
    assert [s["steps"] for s in second["stages"]] == [steps, steps] and steps < 3
    assert len(trained_pairs(root)) == full["pairs_trained"] + tick["new"]
    lines = (Path(root) / "models" / "ticks" / "2" / "pairs.jsonl").read_text().splitlines()
    written = [json.loads(line) for line in lines]
    assert len(written) == record["pairs_trained"]
    assert all(set(r) == {"query", "document", "negatives"} for r in written)
    assert sum("zorblaxin" in r["query"] for r in written) == tick["new"]  # the new pairs, and earlier ones replayed

    # Stage 1 from the live model: every live token keeps its id and its row; the new word joins V_D.
    stage1 = Path(root) / "models" / "ticks" / "2" / "stage1"
    before, after = AutoTokenizer.from_pretrained(live["adapted"]), AutoTokenizer.from_pretrained(stage1)
    assert all(after.get_vocab()[t] == i for t, i in before.get_vocab().items())
    assert second["vocab"]["tokens_added"] > 0 and len(after) > len(before)
    assert after.tokenize("zorblaxin") == ["zorblaxin"] and len(before.tokenize("zorblaxin")) > 1
    old = rows(live["adapted"])
    assert torch.equal(rows(str(stage1))[: old.shape[0]], old)
    live_ids, tick_ids = read_domain_ids(live["adapted"]).tolist(), read_domain_ids(stage1).tolist()
    assert tick_ids[: len(live_ids)] == live_ids and after.convert_tokens_to_ids("zorblaxin") in tick_ids
    assert (stage1 / "mlm_head.safetensors").is_file()  # the live model's trained head, its bias grown

    # The control continued from the live control, on the same pairs and steps.
    control = read_stage_record(Path(root) / "models" / "ticks" / "2" / "control" / "1-control")
    assert Path(control["input_model"]).resolve() == Path(live["control"]).resolve()
    assert control["result"]["steps"] == 2 * steps and control["result"]["pairs"] == record["pairs_trained"]

    # The full tick keeps its test pairs, in the held-out task's query order (q<i>: the i-th), which
    # a tick's score drift compares the pairs added since with; 6 test pairs: too few new ones to measure.
    heldout, _ = cfg.eval_specs(root)[0].held_out(READERS, pool=10)
    assert [int(h, 16) for h in full["test_pairs"]] == content_hashes(*zip(*heldout, strict=True)).tolist()
    assert "test_pairs" not in record and record["score_drift"] is None

    third = mosaic_pipeline(cfg, root)  # nothing new: the live models stand
    assert third["tick"]["kind"] == "none" and len(read_ticks(root)) == 2 and third["stages"] == []

    history = CliRunner(env={"COLUMNS": "300"}).invoke(app, ["history", "-d", root])
    assert history.exit_code == 0 and "Ticks" in history.output, history.output
    assert "the data root's first run" in history.output and f"{tick['new']} new pairs (" in history.output

    asked = prepare_tick.fn(root, cfg, full=True)  # `mosaic run --full`, the deployment's `full`
    assert (asked["kind"], asked["reason"], asked["record"]) == ("full", "a full rebuild was asked for", True)


def test_a_tick_gives_the_rows_it_defines_the_updates_a_full_rebuild_gave_its_rows(tmp_path):
    folder, root = tmp_path / "pairs", str(tmp_path / "root")
    folder.mkdir()
    pairs_file(folder / "a.jsonl", 0, 60)
    glossary = tmp_path / "glossary.jsonl"
    glossary.write_text("".join(json.dumps({"term": t, "definition": d}) + "\n" for t, d in [
        ("heparin", "a drug that stops the blood from clotting"), ("warfarin", "a drug that thins the blood"),
        ("aspirin", "a drug that eases pain"), ("insulin", "a hormone that lowers blood sugar"),
        ("zorblaxin", "a drug that blocks the sodium channels of the heart")]))
    cfg = config(folder, tiny_bert(tmp_path / "base")).overridden({
        "glossary": {"path": str(glossary), "define_steps": 16, "dictionary": {"epochs": 0}},
        "vocab.distill.batch_size": 8, "update.epochs": None})
    mosaic_pipeline(cfg, root)
    full = json.loads((Path(root) / "models" / "stage1" / "vocab_report.json").read_text())["glossary"]["defined"]
    assert full["tokens"] == 4 and full["steps"] == 16 and full["batch_size"] == 8

    pairs_file(folder / "b.jsonl", 1000, 10, word="zorblaxin")
    second = mosaic_pipeline(cfg, root)
    tick = second["tick"]
    assert tick["kind"] == "update" and tick["row_budget"] == {"updates": full["row_updates"], "terms": 4}
    # update.epochs unset: each stage trains the tick's pairs at the full rebuild's rate (its steps × batch / pairs).
    [folder] = (Path(root) / "models").glob("*-joint")
    joint = read_stage_record(folder)["result"]
    assert tick["passes"]["joint"] == pytest.approx(joint["steps"] * 4 / joint["pairs"])
    pairs = tick["new"] + tick["replay"]
    assert second["stages"][0]["steps"] == min(3, math.ceil(tick["passes"]["joint"] * pairs / 4))
    report = json.loads((Path(root) / "models" / "ticks" / "2" / "stage1" / "vocab_report.json").read_text())
    defined = report["glossary"]["defined"]
    assert defined["tokens"] == 1 and defined["batch_size"] == 2  # one term of four: a quarter of the batch
    # Its one row is in every batch: as many steps as the full rebuild's rows had updates, not 16 / 4.
    assert defined["steps"] == math.ceil(full["row_updates"]) == math.ceil(defined["row_updates"]) > 16 / 4
