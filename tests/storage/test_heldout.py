"""A data root's held-out split: recorded by its first run, kept by every later one as the root
gains and loses pairs, by training and evaluation alike; and what the next run's report is told."""

from datetime import datetime, timezone

from mosaic_core.config import TrainConfig
from mosaic_core.eval_tasks import HeldoutTask
from mosaic_core.trainer.heldout import Kept, split_indices
from storage import schemas
from storage.examples import examples_file, read_batches, write_examples
from storage.heldout import recorded_thresholds, split_origin
from storage.layout import DataLayout
from storage.manifest import Manifest, write_manifest
from storage.parquet import write_partition
from tasks.evaluate import READERS
from tasks.heldout import hold_out, recorded_split
from tasks.train import load_split


def pairs(start, n):
    return [(f"query {i} on the kidney", f"abstract {i}: the kidney and the heart") for i in range(start, start + n)]


def write_file(root, name, kept):
    """``kept`` as the filter's kept pairs of the source file ``name`` of the data root ``root``."""
    layout = DataLayout(root)
    write_partition(layout.partition_path("filtered", name), schemas.FILTERED, [[
        {"pair_id": f"{i:05d}", "source_file": name, "query": q, "document": d, "kept": True, "rank": 1,
         "cosine": 0.5, "chunk": 0, "negatives": []} for i, (q, d) in enumerate(kept)]])
    write_manifest(layout, Manifest(stage="filter", partition=name, source="x", source_md5=f"m{len(kept)}",
                                    file_seq=-1, config_hash="c", code_version="v", status="complete",
                                    records_in=len(kept), rows_out=len(kept), kept=len(kept), dropped={}, outputs=[],
                                    started_at=datetime.now(timezone.utc)))


def held_out(root, n_test):
    task = HeldoutTask(name="heldout", path=str(root), heldout_pairs=n_test)
    return set(task.held_out(READERS, 0)[0])


def test_a_grown_data_root_keeps_its_test_pairs_and_its_report_says_how_they_changed(tmp_path):
    root, n_test, n_validation = tmp_path / "root", 40, 30
    baseline = pairs(0, 1000)
    write_file(root, "a", baseline)
    assert recorded_split(str(root), n_test, n_validation) == Kept()  # no run yet: drawn afresh
    first = hold_out.fn(str(root), n_test, n_validation)
    assert first == {"pairs": n_test, "added": None, "gone": None, "previous": None, "validation": n_validation,
                     "since": None}
    before = held_out(root, n_test)
    fresh = split_indices(baseline, n_test, n_validation)  # a fresh root: the first 40 by content hash, as ever
    assert before == {baseline[i] for i in fresh.test}
    thresholds = recorded_thresholds(str(root), n_test, n_validation)

    deleted = sorted(before)[:2]  # two held-out citations deleted, one revised
    revised = sorted(before)[2]
    write_file(root, "a", [p if p != revised else (p[0], p[1] + " Revised.") for p in baseline if p not in deleted])
    write_file(root, "b", pairs(5000, 500))  # an update file of new pairs
    second = hold_out.fn(str(root), n_test, n_validation)
    after = held_out(root, n_test)
    assert before - {*deleted, revised} <= after  # every test pair still in the corpus stays a test pair
    assert second["gone"] == 3 and second["added"] == len(after - before) and second["pairs"] == len(after)
    assert second["previous"] == n_test and second["since"] is not None
    assert recorded_thresholds(str(root), n_test, n_validation) == thresholds  # recorded once, never moved

    cfg = TrainConfig(heldout_pairs=n_test, validation_pairs=n_validation, validation_pool=10)
    train, probe = load_split(str(root), cfg, cfg.stages[0], str(tmp_path / "work"))
    trained = {train.example(i)[:2] for i in range(len(train))}
    assert not trained & after and len(probe.queries) == second["validation"]  # training never sees them
    assert len(trained) + len(after) + second["validation"] == 1000 - 2 + 500

    source = examples_file(str(root), "query", "document", tmp_path / "work")
    mined = root / "models" / "hard_negatives-joint.arrow"  # a file derived from the root's pairs follows its split
    write_examples(mined, read_batches(source), split_of=split_origin(str(root)))
    assert recorded_split(str(mined), n_test, n_validation) == recorded_split(str(root), n_test, n_validation)
    moved = root.rename(tmp_path / "moved")  # a data root moved whole still finds its record
    assert split_origin(str(moved / "models" / "hard_negatives-joint.arrow")) == moved.resolve()
    assert split_origin(str(source)) is None  # an examples file of no data root's: split afresh
