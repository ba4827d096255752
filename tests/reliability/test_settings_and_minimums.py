"""Settings checked against what they become and what the data allows: a name that becomes a
path stays inside its folder, a batch larger than the data is refused, and a pairs source that
is empty, too small or all repeats says so before any model is loaded."""

import json

import pytest
from pydantic import ValidationError

from flows.own_pairs import own_pairs_flow
from mosaic_core.config import OwnPairsConfig, StageConfig
from mosaic_core.eval_tasks import MtebTask
from mosaic_core.trainer import StageInputError
from mosaic_core.trainer.build import check_inputs
from mosaic_core.trainer.data import PairSet
from storage.own_pairs import check_own_pairs
from storage.pairs_io import CorpusError, check_pairs_source
from mosaic_core.data.splits import pairs_needed
from tasks.own_pairs import check_enough_pairs


@pytest.mark.parametrize("name", ["../../../ESCAPED", "..", ".", "a/b", "a\\b"])
def test_a_task_name_that_would_leave_its_folder_is_refused(name):
    with pytest.raises(ValidationError, match="becomes a file name"):
        MtebTask(name=name)
    assert MtebTask(name="SciFact-PL.v2").name == "SciFact-PL.v2"


def test_a_batch_larger_than_the_training_pairs_is_an_error():
    data = PairSet.of([(f"q{i}", f"d{i}") for i in range(300)])
    stage = StageConfig(name="joint", kind="contrastive", batch_size=1_000_000_000)
    with pytest.raises(StageInputError, match=r"a batch of 1,000,000,000 pairs is more than its 300 training pairs"):
        check_inputs(stage, "base", "/nonexistent", None, data)
    check_inputs(stage.model_copy(update={"batch_size": 300}), "base", "/nonexistent", None, data)


@pytest.mark.parametrize("content", ["", "\n\nnot json\n"])
def test_an_empty_pairs_file_says_it_is_empty_not_that_a_column_is_missing(tmp_path, content):
    path = tmp_path / "pairs.jsonl"
    path.write_text(content)
    for check in (lambda: check_pairs_source(str(path), ("query", "document")),
                  lambda: check_own_pairs(str(path), "query", "document")):
        with pytest.raises(CorpusError, match="is empty|has no row that reads") as err:
            check()
        assert "no column" not in str(err.value)


def test_the_pairs_a_run_needs_leave_one_batch_after_the_held_out_ones():
    assert pairs_needed(32, 256, 256) == 48  # 9 test, 7 validation, 32 to train
    assert pairs_needed(6, 4, 4) == 8


@pytest.mark.usefixtures("prefect_harness")
def test_one_pair_or_one_pair_repeated_is_refused_up_front(tmp_path):
    pair = {"query": "renal outcomes of the new treatment", "document": "We studied the kidneys of patients " * 4}
    for rows, expected in ((1, r"1 distinct usable pairs; a run needs at least 48"),
                           (300, r"1 distinct usable pairs \(299 rows repeat another\); a run needs at least 48")):
        source, root = tmp_path / f"pairs-{rows}.jsonl", tmp_path / f"root-{rows}"
        source.write_text((json.dumps(pair) + "\n") * rows)
        own_pairs_flow(OwnPairsConfig(path=str(source), keep_languages=None), str(root))
        with pytest.raises(CorpusError, match=expected):
            check_enough_pairs(str(root), str(source), 32, 256, 256)


def test_a_bad_stage_setting_is_one_error_not_two():
    from mosaic_core.config import PipelineConfig

    with pytest.raises(ValidationError) as err:
        PipelineConfig.load({"train": {"stages": [{"name": "x", "kind": "contrastive", "batch_size": -1}]}})
    assert err.value.error_count() == 1 and "batch_size" in str(err.value)
    with pytest.raises(ValidationError, match="at least one stage"):
        PipelineConfig.load({"train": {"stages": []}})
