import json
import shutil

import pytest
import torch
from builders import stage1_config, tiny_bert

from flows.train import train_flow
from mosaic_core.config import StageConfig, TrainConfig
from mosaic_core.data.consistency import consistency_filter
from mosaic_core.modeling.encode import Encoder
from mosaic_core.modeling.modeldir import has_trained_head, read_stage_record
from mosaic_core.vocab.build import build_expanded_model
from storage.examples import map_examples
from tasks.train import FAIL_ENV

pytestmark = pytest.mark.usefixtures("prefect_harness")

TOPICS = ["cardiomyopathy", "immunotherapy", "hepatocytes", "nephropathy", "angiogenesis", "leukocytes"]
PAIRS = [{"query": f"{t} in patients {i}", "document": f"patients with {t} were treated; {t} and cells {i}"}
         for i in range(4) for t in TOPICS]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    corpus = root / "pairs.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in PAIRS) + "{broken line\n")
    stage1 = root / "stage1"
    build_expanded_model([t for p in PAIRS for t in p.values()] * 3, stage1,
                         stage1_config(tiny_bert(root / "base"), vocab_size=300))
    return str(stage1), str(corpus)


def config(**kw) -> TrainConfig:
    common = dict(batch_size=6, chunk_size=3, max_steps=3, lr=1e-3, precision="fp32", checkpoint_every=1)
    stages = (StageConfig(name="joint", kind="joint", **common),
              StageConfig(name="contrastive", kind="contrastive", **common))
    return TrainConfig(stages=stages, **{"heldout_pairs": 4, "mlm_warmup": "off", **kw})


def test_stages_chain_cache_and_a_failed_stage_resumes(inputs, tmp_path, monkeypatch):
    stage1, corpus = inputs
    out = tmp_path / "run"
    monkeypatch.setenv(FAIL_ENV, "contrastive:2")
    with pytest.raises(Exception, match="injected failure after step 2"):
        train_flow(stage1, corpus, config(), str(out))
    joint_done = (out / "1-joint" / "stage.json").stat().st_mtime_ns
    assert (out / "2-contrastive" / "checkpoints").is_dir() and not (out / "2-contrastive" / "stage.json").exists()

    monkeypatch.delenv(FAIL_ENV)
    joint, contrastive = train_flow(stage1, corpus, config(), str(out))
    assert (out / "1-joint" / "stage.json").stat().st_mtime_ns == joint_done  # completed stage: from cache
    assert contrastive["resumed_from"] == 2 and contrastive["steps"] == 3  # failed stage: resumed
    # 4 test pairs and 4 validation pairs (a fifth of the rest) are held out; validation scores the stage.
    assert joint["pairs"] == len(PAIRS) - 8 and joint["evals"][-1]["n"] == 4
    assert read_stage_record(out / "2-contrastive")["input_model"] == str((out / "1-joint").resolve())

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, FlowRunFilter, TaskRunFilter
    from prefect.client.schemas.sorting import ArtifactSort

    with get_client(sync_client=True) as client:  # live progress of each stage in the UI
        progress = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["train-joint"])),
                                         flow_run_filter=FlowRunFilter(), task_run_filter=TaskRunFilter(),
                                         sort=ArtifactSort.CREATED_DESC, limit=5, offset=0)
    assert progress and progress[0].type == "progress" and progress[0].data == 100.0
    assert "stage joint: step 3/3" in progress[0].description

    again = train_flow(stage1, corpus, config(), str(out))
    assert again == [joint, contrastive]  # everything cached
    changed = train_flow(stage1, corpus, config(heldout_pairs=2), str(out))
    assert changed[0]["pairs"] == len(PAIRS) - 2 - 4  # a new data split retrains


def test_a_stage_1_without_an_mlm_head_gets_the_warm_up_first(inputs, tmp_path, caplog):
    stage1, corpus = inputs  # stage 1 of a tiny BERT saved without its MLM head
    warmup, joint, contrastive = train_flow(stage1, corpus, config(mlm_warmup="auto"), str(tmp_path / "run"))
    assert [r["stage"] for r in (warmup, joint, contrastive)] == ["mlm", "joint", "contrastive"]
    assert warmup["out_dir"].endswith("1-mlm") and contrastive["out_dir"].endswith("3-contrastive")
    assert warmup["steps"] <= 3 and has_trained_head(warmup["out_dir"])  # at most the joint stage's steps
    assert read_stage_record(tmp_path / "run" / "2-joint")["input_model"] == str((tmp_path / "run" / "1-mlm").resolve())
    assert not any("has no MLM head" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)


def test_two_process_data_parallel_stage(inputs, tmp_path):
    stage1, corpus = inputs
    cfg = TrainConfig(stages=(StageConfig(name="joint", kind="joint", batch_size=6, max_steps=2, lr=1e-3,
                                          precision="fp32"),), heldout_pairs=4, mlm_warmup="off")
    (result,) = train_flow(stage1, corpus, cfg, str(tmp_path / "ddp"), processes=2)
    assert result["world"] == 2 and result["steps"] == 2
    assert (tmp_path / "ddp" / "1-joint" / "model.safetensors").exists()


def test_two_ranks_train_the_weights_one_process_trains(inputs, tmp_path):
    """DDP with a differentiable in-batch gather: 2 ranks × 3 pairs (gradient-cached in chunks
    of 2, 2 accumulation passes per step) give the gradients of 6 pairs on one process."""
    from safetensors.torch import load_file

    stage1, corpus = inputs
    still = tmp_path / "stage1"
    shutil.copytree(stage1, still)
    config_json = json.loads((still / "config.json").read_text())  # no dropout: the ranks draw their own masks
    (still / "config.json").write_text(json.dumps({**config_json, "hidden_dropout_prob": 0.0,
                                                   "attention_probs_dropout_prob": 0.0}))
    cfg = TrainConfig(stages=(StageConfig(name="contrastive", kind="contrastive", batch_size=6, chunk_size=2,
                                          accumulation=2, max_steps=3, lr=1e-3, precision="fp32"),),
                      heldout_pairs=4)
    weights = {}
    for processes in (1, 2):
        (result,) = train_flow(str(still), corpus, cfg, str(tmp_path / f"p{processes}"), processes=processes)
        assert result["world"] == processes
        weights[processes] = load_file(tmp_path / f"p{processes}" / "1-contrastive" / "model.safetensors")
    start = load_file(still / "model.safetensors")
    assert any(not torch.equal(start[k], weights[1][k]) for k in start)  # the stage trained
    for name, w in weights[1].items():
        torch.testing.assert_close(weights[2][name], w, rtol=1e-4, atol=2e-5, msg=name)


def test_a_stage_with_its_own_pairs_and_columns_and_mined_hard_negatives(inputs, tmp_path):
    stage1, corpus = inputs
    general = tmp_path / "general.jsonl"  # seed 004: general retrieval pairs with their own hard negatives
    general.write_text("".join(json.dumps({"question": f"general question {i}", "passage": f"general passage {i}",
                                           "negative": f"unrelated passage {i + 1}"}) + "\n" for i in range(30)))
    common = dict(batch_size=6, max_steps=2, lr=1e-3, precision="fp32", hard_negatives=1)
    cfg = TrainConfig(heldout_pairs=4, stages=(
        StageConfig(name="general", kind="contrastive", pairs=str(general), query_column="question",
                    document_column="passage", **common),
        StageConfig(name="domain", kind="contrastive", **common)))
    general_result, domain_result = train_flow(stage1, corpus, cfg, str(tmp_path / "run"))
    assert general_result["pairs"] == 30 - 4 - 5 and general_result["negatives_per_pair"] == 1.0
    assert domain_result["pairs"] == len(PAIRS) - 8 and 0 < domain_result["negatives_per_pair"] <= 1.0
    # the mined negatives: row references to the documents the consistency filter's search ranks first
    mined = map_examples(tmp_path / "run" / "hard_negatives-domain.arrow")
    assert mined.column("document").to_pylist() == [p["document"] for p in PAIRS]  # each text once, no copies
    stage = cfg.stages[1]
    enc = Encoder.load(stage1, normalize=True)
    q = enc.with_max_length(stage.query_max_length).encode([p["query"] for p in PAIRS], kind="query")
    d = enc.with_max_length(stage.document_max_length).encode([p["document"] for p in PAIRS], kind="document")
    expected = consistency_filter(q, d, k=1, doc_keys=[p["document"] for p in PAIRS], negatives=1).negatives
    assert mined.column("negatives").to_pylist() == expected and any(expected)
    assert not (tmp_path / "run" / "hard_negatives-general.arrow").exists()  # the general file brought its own
    assert not list((tmp_path / "run").glob("*.embeddings"))  # the chunk's embedding files are removed
    written = mined.to_pylist()
    del mined
    path = tmp_path / "run" / "hard_negatives-domain.arrow"
    path.write_bytes(path.read_bytes()[:200])  # damaged: the rerun mines again instead of trusting its record
    again = train_flow(stage1, corpus, cfg, str(tmp_path / "run"))
    assert map_examples(path).to_pylist() == written and [r["steps"] for r in again] == [2, 2]


def test_a_sparse_run_on_real_pairs_trains_saves_and_scores_as_splade(tmp_path):
    """Seed 003's sparse kind through the flows on real biomedical pairs: stage 1 and a joint stage
    written as SparseEncoders, scored by mteb as SPLADE on the held-out pairs (the base too)."""
    from builders import shared_data

    from flows.evaluate import eval_flow
    from mosaic_core.config import EvalConfig
    from mosaic_core.eval_tasks import HeldoutTask

    rows = [json.loads(line) for line in shared_data("biomed", "biomed_title_abstract.jsonl").open()][:60]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": r["title"], "document": r["abstract"]}) + "\n" for r in rows))
    base = tiny_bert(tmp_path / "base", mlm_head=True)
    stage1 = tmp_path / "stage1"
    build_expanded_model([t for r in rows for t in (r["title"], r["abstract"])], stage1,
                         stage1_config(base, vocab_size=400, min_count=3, model_kind="sparse"))
    stage = StageConfig(name="joint", kind="joint", model_kind="sparse", batch_size=8, chunk_size=4, max_steps=3,
                        lr=1e-3, precision="fp32", document_max_length=64)
    (joint,) = train_flow(str(stage1), str(pairs), TrainConfig(stages=(stage,), heldout_pairs=8), str(tmp_path / "run"))
    assert joint["final"]["flops"] > 0 and joint["domain_vocab"] > 0
    spec = HeldoutTask(name="heldout", path=str(pairs), heldout_pairs=8, pool=20)
    report = eval_flow({"base": str(base), "adapted": joint["out_dir"]},
                       EvalConfig(tasks=(spec,), model_kind="sparse"), str(tmp_path / "report"))
    for model in ("base", "adapted"):
        (score,) = report["scores"][model]
        assert score["n"] == 8 and 0 <= score["value"] <= 1


def test_a_margin_mse_stage_trains_on_its_teachers_margins_of_the_negatives_it_uses(inputs, tmp_path):
    import math

    import numpy as np
    from builders import tiny_cross_encoder

    from mosaic_core.data.query_gen import load_cross_encoder, score_pairs
    from mosaic_core.trainer import PairSet
    from mosaic_core.trainer.heldout import training_examples
    from storage.examples import read_batches
    from tasks.margins import with_margins

    stage1, _ = inputs
    corpus = tmp_path / "pairs.jsonl"  # two negatives a pair, other pairs' documents: some are held out
    corpus.write_text("".join(json.dumps({**p, "negative": PAIRS[(i + 1) % len(PAIRS)]["document"],
                                          "negative_2": PAIRS[(i + 5) % len(PAIRS)]["document"]}) + "\n"
                              for i, p in enumerate(PAIRS)))
    teacher = str(tiny_cross_encoder(tmp_path / "teacher"))
    stage = StageConfig(name="gpl", kind="contrastive", batch_size=6, max_steps=2, lr=1e-3, precision="fp32",
                        hard_negatives=1, objective="margin_mse", teacher=teacher)
    cfg = TrainConfig(stages=(stage,), heldout_pairs=4)
    (result,) = train_flow(stage1, str(corpus), cfg, str(tmp_path / "run"))
    assert result["final"]["margin_mse"] > 0 and "contrastive" not in result["final"]
    labelled = tmp_path / "run" / "margins-gpl.arrow"
    table = map_examples(labelled)
    train = training_examples(PairSet(table), lambda: read_batches(labelled), cfg.heldout_pairs, cfg.validation_pairs)
    assert len(train) == len(PAIRS) - 8 and train.skip.any()  # the split the stage trained on, held-out docs skipped
    # each training pair's first usable negative is scored, and nothing else: not its second, not a held-out pair
    used = [(train.example(i)[0], train.example(i)[1], train.example(i)[2], train.margins(i)[0])
            for i in range(len(train)) if len(train.example(i)) > 2]
    ce = load_cross_encoder(teacher)
    pos = score_pairs(ce, [q for q, *_ in used], [d for _, d, *_ in used])
    neg = score_pairs(ce, [q for q, *_ in used], [n for _, _, n, _ in used])
    assert [m for *_, m in used] == pytest.approx([p - n for p, n in zip(pos, neg, strict=True)], abs=1e-4)
    assert max(abs(m) for *_, m in used) > 0.1  # the teacher tells pairs apart
    flat = np.array([m for row in table.column("margins").to_pylist() for m in row])
    assert (~np.isnan(flat)).sum() == len(used) and len(flat) == 2 * len(PAIRS)

    def same(a: list, b: list) -> bool:
        return all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b, strict=True))

    def margins_of(path) -> list:
        return [m for row in map_examples(path).column("margins").to_pylist() for m in row]
    firsts = list(flat)
    del table
    labelled.write_bytes(labelled.read_bytes()[:100])  # a damaged label file is labelled again, not trusted
    args = (str(corpus), teacher, "query", "document", 1, (4, 256), str(labelled), str(tmp_path / "run" / "examples"))
    assert with_margins(*args) == str(labelled) and same(margins_of(labelled), firsts)
    # another teacher overwrites the file; back to the first, its cache record must not take that file
    other = str(tiny_cross_encoder(tmp_path / "other", seed=2))
    with_margins(str(corpus), other, *args[2:])
    assert not same(margins_of(labelled), firsts)
    assert with_margins(*args) == str(labelled) and same(margins_of(labelled), firsts)
    # an already labelled source is labelled again by the stage's teacher, never taken as it is
    relabelled = tmp_path / "relabelled.arrow"
    with_margins(str(labelled), other, *args[2:6], str(relabelled), args[7])
    assert not same(margins_of(relabelled), firsts)
