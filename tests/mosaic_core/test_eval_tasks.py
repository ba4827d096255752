"""Evaluation task kinds: read from config by their kind, with clear errors; checksums unchanged
from the flat spec they replaced; and a new kind needs only its class (docs/architecture.md)."""

import hashlib
import inspect
import json
from typing import Literal

import pytest
from builders import tiny_bert
from pydantic import Field, TypeAdapter, ValidationError

import mosaic_core.eval_tasks as kinds
from mosaic_core.config import EvalConfig, PipelineConfig
from mosaic_core.eval_tasks import (KINDS, BeirTask, EvalTask, HeldoutTask, MtebTask, StsTask, TaskReaders, VersesTask,
                                    tagged_union)
from mosaic_core.evaluate.scoring import TaskUnavailable
from tasks.evaluate import READERS, evaluate_task, load_task, task_checksum
from tasks.keys import cache_key

NOWHERE = "/nonexistent"


def test_a_config_reads_each_kind_and_dumps_its_own_fields():
    cfg = PipelineConfig.load({"eval_tasks": [
        {"kind": "mteb", "name": "BIOSSES"}, {"kind": "beir", "name": "scifact", "path": "x", "split": "dev"},
        {"kind": "sts", "name": "s", "path": "s.csv"},
        {"kind": "heldout", "name": "h", "path": "p.jsonl", "pool": 20, "held": "validation", "validation_pairs": 4},
        {"kind": "verses", "name": "v", "path": "root", "collection": "quran.txt"}]})
    assert [type(t) for t in cfg.eval_tasks] == [MtebTask, BeirTask, StsTask, HeldoutTask, VersesTask]
    assert cfg.eval_tasks[1].split == "dev" and cfg.eval_tasks[3].pool == 20
    assert cfg.eval_tasks[1].model_dump() == {"kind": "beir", "name": "scifact", "description": None, "path": "x",
                                              "split": "dev"}
    assert PipelineConfig.model_validate(cfg.model_dump()) == cfg
    evaluation = EvalConfig(tasks=cfg.eval_tasks)
    assert EvalConfig.model_validate_json(evaluation.model_dump_json()) == evaluation


@pytest.mark.parametrize(("task", "error"), [
    ({"kind": "beir", "name": "x"}, r"eval_tasks\.0\.beir\.path\n  Field required"),
    ({"kind": "sts", "name": "x", "path": ""}, r"sts\.path\n  String should have at least 1 character"),
    ({"kind": "verses", "name": "v", "path": "p"}, r"verses\.collection\n  Field required"),
    ({"kind": "bogus", "name": "x"}, "kind is one of mteb, beir, sts, heldout, verses"),
    ({"name": "x"}, "kind is one of mteb, beir, sts, heldout, verses"),
    ({"kind": "mteb", "name": "x", "path": "p"}, r"mteb\.path\n  Extra inputs are not permitted"),
    ({"kind": "verses", "name": "v", "path": "p", "collection": "q", "pool": 5}, r"verses\.pool\n  Extra inputs"),
    ({"kind": "heldout", "name": "h", "path": "p", "pool": True}, "pool must be a number, not the boolean True"),
    ({"kind": "beir", "name": "../x", "path": "p"}, "becomes a file name"),
])
def test_a_wrong_task_is_refused_naming_what_to_fix(task, error):
    with pytest.raises(ValidationError, match=error):
        PipelineConfig.load({"eval_tasks": [task]})


def test_checksums_are_those_of_the_flat_spec_before_kinds():
    # Computed by the flat EvalTaskSpec (one class, every field) these classes replaced: the same
    # keys, so cached evaluations stay valid. The paths do not exist: the data part is then a
    # digest of nothing, the same on every machine.
    cfg = PipelineConfig.load({"islamic": {"quran": f"{NOWHERE}/quran.txt", "tafsir": f"{NOWHERE}/t"}})
    specs = {"evaltask-6fd0b93d3ce0f6b455277183": BeirTask(name="scifact", path=f"{NOWHERE}/scifact"),
             "evaltask-34e8e5076d1607cc6ebdbe93": BeirTask(name="scifact", path=f"{NOWHERE}/scifact", split="dev",
                                                           description="d"),
             "evaltask-b73b14c437e902259473817f": StsTask(name="toy-sts", path=f"{NOWHERE}/sts.csv"),
             "evaltask-926c8e5c38a433e099cd953e": HeldoutTask(name="heldout", path=f"{NOWHERE}/pairs.jsonl",
                                                              heldout_pairs=8, pool=20),
             "evaltask-55dd635e9508275cfc7b6d07": VersesTask(name="verses", path=f"{NOWHERE}/root",
                                                             collection=f"{NOWHERE}/quran.txt")}
    for key, spec in specs.items():
        assert task_checksum(spec) == key, spec
    run = (*cfg.eval_specs(f"{NOWHERE}/root"), cfg.validation_spec(f"{NOWHERE}/root"))
    assert [task_checksum(s) for s in run] == ["evaltask-020a218160ad9e545414fa99", "evaltask-9082887301bba3ed8d09934e",
                                               "evaltask-ff2212fabc5a5f4b288b2e13"]
    mteb = MtebTask(name="BIOSSES")
    assert task_checksum(mteb) == cache_key("evaltask", f"mteb-{READERS.mteb_version()}", "60079dd6f07f8249")


def test_a_checksum_follows_the_files(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "qrels" / "test.tsv").write_text("q1\td1\t1\n")
    spec = BeirTask(name="b", path=str(folder))
    before = task_checksum(spec)
    (folder / "corpus.jsonl").write_text("{}\n")
    assert task_checksum(spec) != before != task_checksum(BeirTask(name="b", path=str(folder), split="test"))


def test_pairs_kinds_say_why_their_data_cannot_be_had(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"query": "a", "document": "b"}) + "\n")
    with pytest.raises(TaskUnavailable, match="too few pairs"):
        load_task(HeldoutTask(name="h", path=str(pairs), heldout_pairs=1))
    pairs.write_text("".join(json.dumps({"query": f"q {i}", "document": f"d {i}"}) + "\n" for i in range(20)))
    with pytest.raises(TaskUnavailable, match="cannot read the verse collection"):
        load_task(VersesTask(name="v", path=str(pairs), heldout_pairs=4, collection=str(tmp_path / "none.txt")))


def test_every_kind_of_the_module_is_in_the_union():
    """Adding a kind is its class in mosaic_core/eval_tasks.py and in KINDS there: a class left out
    of KINDS fails here."""
    defined = {c for _, c in inspect.getmembers(kinds, inspect.isclass)
               if issubclass(c, EvalTask) and not inspect.isabstract(c) and c.__module__ == kinds.__name__}
    assert defined == set(KINDS)
    names = [k.model_fields["kind"].default for k in KINDS]
    assert len(set(names)) == len(names)


class ToyTask(EvalTask):
    """A kind written the way docs/architecture.md says: its kind, its fields, its two methods."""

    kind: Literal["toy"] = Field("toy", description="toy: documents found by their first word.")
    documents: tuple[str, ...] = Field(..., min_length=2, description="The documents.")

    def data_checksum(self, readers: TaskReaders) -> str:
        return hashlib.sha256("\n".join(self.documents).encode()).hexdigest()[:16]

    def load(self, readers: TaskReaders):
        corpus = [{"id": f"d{i}", "title": "", "text": d} for i, d in enumerate(self.documents)]
        queries = {f"q{i}": d.split()[0] for i, d in enumerate(self.documents)}
        qrels = {f"q{i}": {f"d{i}": 1} for i in range(len(self.documents))}
        return readers.retrieval_task(self.name, corpus, queries, qrels, "each document from its first word")


def test_a_new_kind_loads_from_config_and_is_scored_without_touching_the_tasks(tmp_path):
    tasks = TypeAdapter(tuple[tagged_union((*KINDS, ToyTask)), ...])  # KINDS with the toy kind added
    toy, beir = tasks.validate_python([{"kind": "toy", "name": "toy", "documents": ["patient cells", "a q was"]},
                                       {"kind": "beir", "name": "b", "path": "x"}])
    assert isinstance(toy, ToyTask) and isinstance(beir, BeirTask)
    assert tasks.validate_json(tasks.dump_json((toy, beir))) == (toy, beir)
    with pytest.raises(ValidationError, match="kind is one of mteb, beir, sts, heldout, verses, toy"):
        tasks.validate_python([{"kind": "toys", "name": "t"}])
    assert task_checksum(toy).startswith("evaltask-") and task_checksum(toy) != task_checksum(
        toy.model_copy(update={"documents": ("patient cells", "a q is")}))
    assert load_task(toy) is load_task(toy)  # loaded once per checksum, like every kind
    score = evaluate_task.fn("tiny", str(tiny_bert(tmp_path / "m")), toy, str(tmp_path / "w"))
    assert score["task"] == "toy" and score["metric"] == "ndcg_at_10" and score["n"] == 2
