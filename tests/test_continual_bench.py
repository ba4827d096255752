"""bench/continual.py's pure parts (nothing is trained): the real pairs' split into a baseline and
updates, the invented-term task restricted to the words introduced so far, which ticks each arm
runs, the arms' configs and source folders, and the tables from records."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from builders import bench_script, shared_data
from mosaic_core.evaluate.scoring import TaskScore


@pytest.fixture(scope="module")
def bench():
    return bench_script("continual")


def rows(n: int) -> list[dict]:
    return [{"id": str(i), "title": f"title {i % 97}", "abstract": f"abstract {i}"} for i in range(n)]


def test_the_real_split_is_deterministic_disjoint_and_covers_every_pair(bench):
    data = rows(1001)
    parts = bench.real_split(data, 10)
    assert len(parts) == 11
    assert len(parts[0]) == 500
    assert sorted(len(p) for p in parts[1:]) == [50] * 9 + [51]
    ids = [r["id"] for p in parts for r in p]
    assert sorted(ids) == sorted(r["id"] for r in data)  # disjoint, and every pair in one part
    shuffled = data[:]
    random.Random(0).shuffle(shuffled)
    assert [[r["id"] for r in p] for p in bench.real_split(shuffled, 10)] == [[r["id"] for r in p] for p in parts]
    assert [len(p) for p in bench.real_split(data, 3)] == [500, 167, 167, 167]


def test_exact_duplicates_are_each_in_one_part(bench):
    data = [{"title": "same", "abstract": "same text"} for _ in range(7)] + rows(13)
    parts = bench.real_split(data, 4)
    assert sum(len(p) for p in parts) == 20
    assert sum(r["title"] == "same" for p in parts for r in p) == 7


def test_the_real_pairs_split_into_a_half_and_ten_parts_of_five_percent(bench):
    path = shared_data("biomed", "biomed_title_abstract.jsonl")
    data = bench.read_rows(path)
    parts = bench.real_split(data, 10)
    assert len(parts[0]) == len(data) // 2
    assert all(abs(len(p) - 0.05 * len(data)) < 1 for p in parts[1:])
    assert sorted(r["id"] for p in parts for r in p) == sorted(r["id"] for r in data)


def invented(values: dict[str, float]) -> TaskScore:
    return TaskScore(task="invented-terms", metric="ndcg_at_10", value=sum(values.values()) / len(values),
                     n=len(values), per_query=values)


def test_restriction_to_introduced_words_keeps_their_queries_only(bench):
    introduced = {"zorvatide": 0, "keltrase": 0, "quelvorin": 1, "tramixide": 2}
    score = invented({"zorvatide-q0": 1.0, "zorvatide-q1": 0.5, "keltrase-q0": 0.0, "quelvorin-q0": 0.25,
                      "quelvorin-q1": 0.75, "tramixide-q0": 0.1})
    so_far = bench.restrict(score, bench.words_by(introduced, 1), "invented-so-far")
    assert set(so_far.per_query) == {"zorvatide-q0", "zorvatide-q1", "keltrase-q0", "quelvorin-q0", "quelvorin-q1"}
    assert so_far.value == pytest.approx(2.5 / 5) and so_far.n == 5 and so_far.task == "invented-so-far"
    new = bench.restrict(score, bench.words_by(introduced, 1, new_only=True), "new-words")
    assert set(new.per_query) == {"quelvorin-q0", "quelvorin-q1"} and new.value == pytest.approx(0.5)
    assert bench.restrict(score, bench.words_by(introduced, 0, new_only=True), "new-words") is None
    assert bench.words_by(introduced, 2) == set(introduced)


def test_which_ticks_each_arm_runs(bench):
    assert bench.arm_ticks("update", 3) == [0, 1, 2, 3]
    assert bench.arm_ticks("none", 3) == []
    assert bench.arm_ticks("full", 3) == [1, 2, 3]
    assert bench.arm_ticks("full", 10, [1, 5, 10, 12]) == [1, 5, 10]


def test_held_out_tasks_pair_by_content_not_position(bench):
    pairs = [("q a", "doc a"), ("q b", "doc b")]
    corpus, queries, qrels = bench.content_task(pairs, ["other doc", "doc a"])
    again = bench.content_task(pairs[::-1], ["other doc"])
    assert queries == {q: again[1][q] for q in queries} and set(queries) == set(again[1])
    assert qrels == again[2]
    assert len(corpus) == 3  # a distractor that is a held-out document is one document
    assert all(next(iter(qrels[q])) in {c["id"] for c in corpus} for q in queries)


def test_the_ticks_record_of_branch_tick_is_read_and_its_absence_tolerated(bench, tmp_path):
    assert bench.last_tick(tmp_path) is None
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "ticks.json").write_text("not json")
    assert bench.last_tick(tmp_path) is None
    entries = [{"kind": "full", "reason": "first", "new_pairs": 900, "pairs_trained": 900, "tokens_added": 61,
                "seconds": 800.0},
               {"kind": "update", "reason": "new pairs", "new_pairs": 40, "pairs_trained": 40, "tokens_added": 1,
                "seconds": 60.0}]
    (tmp_path / "state" / "ticks.json").write_text(json.dumps(entries))
    assert bench.last_tick(tmp_path) == entries[1]


def test_the_full_arm_stops_early_without_the_full_flag(bench, monkeypatch):
    def help_saying(text):
        return lambda *a, **k: SimpleNamespace(stdout=text)
    monkeypatch.setattr(bench.subprocess, "run", help_saying("--config -c ... --full-log --fullness"))
    with pytest.raises(SystemExit, match="branch tick"):
        bench.check_full_flag()
    monkeypatch.setattr(bench.subprocess, "run", help_saying("│ --full          Rebuild everything"))
    bench.check_full_flag()


def test_each_arm_runs_the_demos_pipeline_on_its_own_snapshot(bench, tmp_path):
    from mosaic_core.data.demo import demo_pipeline
    from tasks.config_file import load_pipeline_config

    setup = bench.demo_setup(tmp_path, 0, 3)
    cfg = load_pipeline_config(str(bench.write_config(setup, "update")))
    assert cfg.source.kind == "pubmed" and Path(cfg.source.source) == setup.arm("update") / "snapshot"
    assert Path(cfg.glossary.path) == setup.folder / "stream" / "glossary.jsonl"
    assert [Path(t.path) for t in cfg.eval_tasks] == [setup.folder / "stream" / "invented-terms"]
    demo = demo_pipeline(0, "task", "glossary").model_dump(mode="json")
    mine = cfg.model_dump(mode="json")
    assert [k for k in demo if demo[k] != mine[k]] == ["source", "eval_tasks", "glossary"]
    assert setup.introduced["quelvorin"] == 1 and len(setup.files) == 4
    assert bench.run_command(setup, "full", Path("c.yaml"))[-1] == "--full"
    assert "--full" not in bench.run_command(setup, "update", Path("c.yaml"))


def test_an_arms_snapshot_gains_one_update_per_tick(bench, tmp_path):
    setup = bench.demo_setup(tmp_path, 0, 3)
    assert bench.source_tick(setup, "full") == -1
    bench.advance(setup, "full", 0)
    assert bench.source_tick(setup, "full") == 0
    assert sorted(p.name for p in (setup.arm("full") / "snapshot" / "baseline").glob("*.xml")) == [
        "pubmed26n0001.xml", "pubmed26n0002.xml"]
    bench.advance(setup, "full", 2)  # a full rebuild after ticks without one gets every update so far
    assert bench.source_tick(setup, "full") == 2
    assert sorted(p.name for p in (setup.arm("full") / "snapshot" / "updatefiles").glob("*.xml")) == [
        "pubmed26n0003.xml", "pubmed26n0004.xml"]


def record(arm: str, tick: int, shift: float, wall: float | None = 100.0) -> dict:
    words = ["zorvatide", "keltrase"] + (["quelvorin"] if tick else [])
    invented_q = {f"{w}-q{k}": 0.5 + shift for w in ("zorvatide", "keltrase", "quelvorin", "tramixide")
                  for k in range(2)}
    heldout = {f"q{i:03d}": 0.5 + shift + 0.1 * (-1) ** i for i in range(40)}
    scores = [{"task": "heldout", "metric": "ndcg_at_10", "value": 0.5 + shift, "n": 40, "per_query": heldout},
              {"task": "invented-terms", "metric": "ndcg_at_10", "value": 0.5 + shift, "n": 8,
               "per_query": invented_q}]
    if tick:
        scores.append({**scores[0], "task": "heldout-t0"})
    return {"point": f"demo-s0-n1-{arm}-t{tick:02d}", "stream": "demo-s0-n1", "arm": arm, "tick": tick,
            "run": {"wall_s": wall, "cpu_s": 1.0} if wall else None,
            "tick_record": {"kind": "update", "new_pairs": 40, "pairs_trained": 40} if arm == "update" and tick
            else None, "words": words, "new_words": words[2:], "scores": scores}


def test_the_tables_compare_each_arm_with_full_and_none_per_tick(bench, tmp_path):
    for arm, tick, shift, wall in (("update", 0, 0.0, 100), ("full", 0, 0.0, 100), ("none", 0, 0.0, 100),
                                   ("update", 1, 0.1, 20), ("full", 1, 0.05, 100), ("none", 1, -0.1, None)):
        (tmp_path / f"demo-s0-n1-{arm}-t{tick:02d}.json").write_text(json.dumps(record(arm, tick, shift, wall)))
    (tmp_path / "demo-s1-n1-update-t00.json").write_text(json.dumps({**record("update", 0, 0.0), "stream": "x"}))
    records = bench.load_records(tmp_path, "demo-s0-n1")
    assert set(records) == {(a, t) for a in ("update", "full", "none") for t in (0, 1)}

    scores = bench.tick_scores(records["update", 0])
    assert set(scores) == {"heldout", "heldout-t0", "invented-so-far"}  # no new word at tick 0
    assert scores["invented-so-far"].n == 4
    assert set(bench.tick_scores(records["update", 1])) == {"heldout", "heldout-t0", "invented-so-far", "new-words"}

    diffs = bench.comparisons(records)
    at1 = {(d["model"], d["reference"], d["task"]): d for d in diffs if d["tick"] == 1}
    assert set(at1) == {(a, r, t) for a, r in (("update", "full"), ("update", "none"), ("full", "none"))
                        for t in ("heldout", "heldout-t0", "invented-so-far", "new-words")}
    assert at1["update", "full", "heldout"]["mean"] == pytest.approx(0.05)
    assert at1["update", "none", "new-words"]["mean"] == pytest.approx(0.2)
    assert at1["update", "none", "new-words"]["queries"] == 2
    assert at1["update", "none", "heldout"]["low"] > 0

    table = "\n".join(bench.tick_table(records))
    assert "| 1 | update | update | 20 | 40 | 40 | 60.00 | 60.00 | 60.00 | 60.00 | – |" in table
    assert "| 1 | none | (tick 0's model) | – | n/a | n/a |" in table
    assert "| 0 | full | n/a | 100 | n/a | n/a |" in table
    lines = bench.differences_table(records)
    assert any(line.startswith("| 1 | update − none | heldout | 40 | +20.00 |") and line.endswith("| yes |")
               for line in lines)


def test_a_ticks_held_out_task_is_written_once_and_checked_against_the_other_roots(bench, tmp_path, monkeypatch):
    import pyarrow as pa

    import storage.heldout
    import storage.pairs_io

    same = [(f"query {i}", f"document number {i}") for i in range(50)]
    pairs = {"update": same, "full": same[::-1], "none": [(f"other {q}", d) for q, d in same]}

    def batches(source, *args, **kwargs):
        queries, documents = zip(*pairs[Path(source).parent.name], strict=True)
        yield pa.record_batch({"query": list(queries), "document": list(documents)})
    monkeypatch.setattr(storage.pairs_io, "pair_batches", batches)
    monkeypatch.setattr(storage.heldout, "recorded_thresholds", lambda *args: (None, None))
    setup = bench.Setup("s", tmp_path, "snapshot", [[]], [], None, {}, [])
    cfg = {"train": {"heldout_pairs": 5}, "eval_pool": 10}

    bench.write_heldout(setup, "update", 0, cfg)
    queries = [json.loads(line) for line in (setup.held(0) / "queries.jsonl").read_text().splitlines()]
    assert len(queries) == 5
    assert len((setup.held(0) / "corpus.jsonl").read_text().splitlines()) == 15
    assert (setup.first / "queries.jsonl").read_text() == (setup.held(0) / "queries.jsonl").read_text()
    assert json.loads((setup.held(0).parent / "heldout.json").read_text())["from"] == "update"
    assert bench.same_heldout(setup, "full", 0, cfg)  # the same pairs in another order
    assert not bench.same_heldout(setup, "none", 0, cfg)
    pairs["update"] = pairs["none"]
    bench.write_heldout(setup, "update", 0, cfg)  # written once: a later call changes nothing
    assert [json.loads(line) for line in (setup.held(0) / "queries.jsonl").read_text().splitlines()] == queries
