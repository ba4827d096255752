"""A damaged cached output is not trusted: a stage whose weights were truncated and a filtered
partition cut short are made again, with one warning naming the file, and the rerun heals."""

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from builders import stage1_config, tiny_bert

from flows.train import train_flow
from mosaic_core.config import StageConfig, TrainConfig
from mosaic_core.modeling.modeldir import is_complete_stage
from mosaic_core.modeling.refs import check_loadable
from mosaic_core.vocab.build import build_expanded_model
from storage.layout import DataLayout, data_root_of
from storage.manifest import Manifest, is_current, write_manifest

pytestmark = pytest.mark.usefixtures("prefect_harness")
TOPICS = ["cardiomyopathy", "immunotherapy", "hepatocytes", "nephropathy", "angiogenesis", "leukocytes"]
PAIRS = [{"query": f"{t} in patients {i}", "document": f"patients with {t} were treated; {t} and cells {i}"}
         for i in range(4) for t in TOPICS]


def truncate(path, keep: float = 0.5) -> None:
    os.truncate(path, int(path.stat().st_size * keep))


def test_a_truncated_stage_model_is_trained_again_and_then_loads(tmp_path, caplog):
    corpus = tmp_path / "pairs.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    stage1 = tmp_path / "stage1"
    build_expanded_model([t for p in PAIRS for t in p.values()] * 3, stage1,
                         stage1_config(tiny_bert(tmp_path / "base"), vocab_size=300))
    cfg = TrainConfig(stages=(StageConfig(name="contrastive", kind="contrastive", batch_size=6, max_steps=2, lr=1e-3,
                                          precision="fp32"),), heldout_pairs=4)
    out = tmp_path / "run"
    (first,) = train_flow(str(stage1), str(corpus), cfg, str(out))
    weights = out / "1-contrastive" / "model.safetensors"
    assert is_complete_stage(weights.parent)
    truncate(weights)
    caplog.set_level("WARNING")
    assert not is_complete_stage(weights.parent)
    assert any("model.safetensors does not read" in r.getMessage() and str(weights.parent) in r.getMessage()
               for r in caplog.records)
    (again,) = train_flow(str(stage1), str(corpus), cfg, str(out))
    check_loadable(weights.parent)  # healed: trained again, not read from the cache
    assert again["steps"] == first["steps"] and again["seconds"] != first["seconds"]


def test_a_truncated_or_short_parquet_partition_is_not_current(tmp_path, caplog):
    layout = DataLayout(tmp_path / "root")
    out = layout.partition_path("filtered", "part-1")
    out.parent.mkdir(parents=True)
    pq.write_table(pa.table({"query": [f"q{i}" for i in range(100)], "document": ["d"] * 100}), out)
    manifest = Manifest(stage="filter", partition="part-1", source="x", source_md5="m", file_seq=-1, config_hash="c",
                        code_version="v", status="complete", records_in=100, rows_out=100, kept=100, dropped={},
                        outputs=[str(out)], started_at="2026-01-01T00:00:00Z")
    write_manifest(layout, manifest)
    assert is_current(layout, "filter", "part-1", "m", "c", "v")
    write_manifest(layout, manifest.model_copy(update={"rows_out": 120}))
    caplog.set_level("WARNING")
    assert not is_current(layout, "filter", "part-1", "m", "c", "v")
    write_manifest(layout, manifest)
    truncate(out, 0.7)
    assert not is_current(layout, "filter", "part-1", "m", "c", "v")
    messages = [r.getMessage() for r in caplog.records]
    assert any("holds 100 rows, its manifest 120" in m for m in messages)
    assert any(str(out) in m and "is damaged" in m for m in messages)


def test_cache_records_go_to_the_data_root_a_path_lies_in(tmp_path):
    root = tmp_path / "root"
    (root / "manifests").mkdir(parents=True)
    assert data_root_of(root / "models" / "1-joint") == root.resolve()
    assert data_root_of(root) == root.resolve()
    assert data_root_of(tmp_path / "elsewhere" / "run") is None


def test_a_read_only_look_at_a_root_leaves_a_damaged_partition_out_with_one_warning(tmp_path, caplog):
    from storage.catalog import Catalog

    layout = DataLayout(tmp_path / "root")
    for name, n in (("good", 5), ("bad", 50)):
        out = layout.partition_path("deletions", name)
        out.parent.mkdir(parents=True)
        pq.write_table(pa.table({"pmid": list(range(n)), "file_seq": [1] * n}), out)
    truncate(layout.partition_path("deletions", "bad"), 0.6)
    caplog.set_level("WARNING")
    with Catalog(layout) as cat:
        cat.refresh()
        assert cat.rows("SELECT count(*) FROM deletions") == [(5,)]
    assert [r.getMessage().split(" is damaged")[0] for r in caplog.records if "is damaged" in r.getMessage()] == \
        [str(layout.partition_path("deletions", "bad"))]


def test_a_damaged_decision_record_is_left_out_of_mosaic_history(tmp_path, caplog):
    from storage.catalog import Catalog

    layout = DataLayout(tmp_path / "root")
    layout.decisions_dir.mkdir(parents=True)
    (layout.decisions_dir / "r1.json").write_text(json.dumps(
        {"run_id": "r1", "decided_at": "2026-11-26T10:00:00Z", "candidate": "m", "published": False,
         "forced": False, "message": "not published"}))
    (layout.decisions_dir / "r2.json").write_text('{"run_id": "r2", "decided_at": "2026-11-26T11:0')
    caplog.set_level("WARNING")
    with Catalog(layout) as cat:
        cat.refresh()
        assert [r[1] for r in cat.decisions(10)] == ["r1"]
    assert any("r2.json is damaged" in r.getMessage() for r in caplog.records)


def test_a_verified_task_asks_its_output_and_travels_to_a_dask_worker(tmp_path):
    import pickle

    import cloudpickle

    from tasks.ingest import ingest_file
    from tasks.results import Verified
    from tasks.train import train_stage_task

    shipped = pickle.loads(cloudpickle.dumps(ingest_file))  # as Dask sends a flow's tasks to its workers
    assert isinstance(shipped, Verified) and shipped.name == "ingest-file" and shipped.fn.__name__ == "ingest_file"
    out = tmp_path / "root" / "models" / "1-joint"
    (tmp_path / "root" / "manifests").mkdir(parents=True)
    checked = train_stage_task._checked(("base", "pairs", None, None, str(out), "examples"), {})
    assert checked.refresh_cache  # no model there: the cached record is not trusted
    assert str(checked.result_storage) == str(DataLayout(str(tmp_path / "root")).results_dir)
