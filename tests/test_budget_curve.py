"""bench/budget_curve.py's report: which budget its rule recommends for a default, from records
of per-query scores (written here; nothing is trained)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from builders import bench_script

QUERIES = 200


@pytest.fixture(scope="module")
def curve():
    return bench_script("budget_curve")


def _record(results: Path, name: str, shift: float | dict[str, float] = 0.0, spread: float = 0.0,
            tasks: tuple[str, ...] = ("scifact", "heldout")) -> None:
    """A record whose per-query NDCG@10 is 0.5 plus ``shift`` (one, or per task), plus and minus
    ``spread`` on alternate queries (noise that leaves the mean where it is)."""
    scores = []
    for task in tasks:
        move = shift.get(task, 0.0) if isinstance(shift, dict) else shift
        values = 0.5 + move + spread * (-1.0) ** np.arange(QUERIES)
        scores.append({"task": task, "metric": "ndcg_at_10", "value": float(values.mean()), "n": QUERIES,
                       "per_query": {f"q{i}": float(v) for i, v in enumerate(values)}})
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{name}.json").write_text(json.dumps({
        "name": name, "machine": {"cpu": "test", "cores": 2, "precision": "fp32"},
        "train": None if name == "base" else {"cpu_s": 60.0, "wall_s": 40.0}, "scores": scores}))


def _by_arm(curve, results: Path) -> dict[str, dict]:
    return {r["arm"]: r for r in curve.collect(results)["recommended"]}


def test_the_smallest_budget_no_other_beats_is_recommended_not_one_only_a_noisy_best_cannot_tell(curve, tmp_path):
    _record(tmp_path, "base")
    # 40 is beaten by 80 (0.02 on every query); the noisy 160 is the best but tells neither from it
    _record(tmp_path, "paper_40_lr1e-05", 0.0)
    _record(tmp_path, "paper_80_lr1e-05", 0.02)
    _record(tmp_path, "paper_160_lr1e-05", 0.025, spread=0.25)

    paper = _by_arm(curve, tmp_path)["paper"]

    assert paper["best"] == "paper_160_lr1e-05"
    assert paper["beaten_by"] == {"paper_40_lr1e-05": ["paper_80_lr1e-05"]}
    assert paper["smallest"] == "paper_80_lr1e-05"
    assert set(paper["vs_best"]) == {"scifact", "heldout"}
    assert all(d["low"] < 0 < d["high"] for d in paper["vs_best"].values())


def test_a_best_in_the_middle_is_recommended_over_smaller_and_larger_budgets(curve, tmp_path):
    _record(tmp_path, "base")
    _record(tmp_path, "control_80_lr1e-05", 0.01)
    _record(tmp_path, "control_160_lr1e-05", 0.05)
    _record(tmp_path, "control_320_lr1e-05", 0.03)  # past the best: beaten by 160

    control = _by_arm(curve, tmp_path)["control"]

    assert control["best"] == control["smallest"] == "control_160_lr1e-05"
    assert control["vs_best"] == {}
    assert control["beaten_by"] == {"control_80_lr1e-05": ["control_160_lr1e-05", "control_320_lr1e-05"],
                                    "control_320_lr1e-05": ["control_160_lr1e-05"]}


def test_no_budget_is_recommended_where_each_is_beaten_on_one_task(curve, tmp_path):
    _record(tmp_path, "base")
    _record(tmp_path, "paper_80_lr1e-05", {"scifact": 0.02})
    _record(tmp_path, "paper_160_lr1e-05", {"heldout": 0.02})

    paper = _by_arm(curve, tmp_path)["paper"]

    assert paper["smallest"] is None
    assert paper["beaten_by"] == {"paper_80_lr1e-05": ["paper_160_lr1e-05"],
                                  "paper_160_lr1e-05": ["paper_80_lr1e-05"]}


def test_a_point_missing_a_task_and_an_arm_at_one_budget_get_no_recommendation(curve, tmp_path):
    _record(tmp_path, "base")
    _record(tmp_path, "paper_80_lr1e-05", 0.01)
    _record(tmp_path, "paper_160_lr1e-05", 0.2, tasks=("heldout",))  # would win, but is not scored on SciFact
    _record(tmp_path, "control_80_lr0.0001", 0.02)

    assert curve.collect(tmp_path)["recommended"] == []


def test_both_stage_arms_are_compared_with_the_control_of_their_budget(curve, tmp_path):
    _record(tmp_path, "base")
    _record(tmp_path, "control_80_lr1e-05", 0.01)
    _record(tmp_path, "paper_80_lr1e-05", 0.0)
    _record(tmp_path, "default_80_lr1e-05", 0.03)

    points = {p["id"]: p for p in curve.collect(tmp_path)["points"]}

    assert points["control_80_lr1e-05"]["vs_control"] is None
    assert points["paper_80_lr1e-05"]["vs_control"]["scifact"]["mean"] == pytest.approx(-1.0)
    assert points["default_80_lr1e-05"]["vs_control"]["heldout"]["mean"] == pytest.approx(2.0)
    assert {p["steps_per_stage"] for k, p in points.items() if k != "control_80_lr1e-05"} == {80}
