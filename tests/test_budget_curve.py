"""bench/budget_curve.py's report: which budget its rule recommends for a default, from records
of per-query scores (written here; nothing is trained)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "budget_curve.py"


def _curve_module():
    spec = importlib.util.spec_from_file_location("budget_curve", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(results: Path, name: str, shift: dict[str, float], noise: float = 0.0) -> None:
    """A record whose per-query NDCG@10 is the base's plus ``shift`` per task (plus noise)."""
    rng = np.random.default_rng(len(name))
    scores = []
    for task in ("scifact", "heldout"):
        base = np.linspace(0.2, 0.9, 200)
        values = np.clip(base + shift.get(task, 0.0) + noise * rng.standard_normal(200), 0, 1)
        per_query = {f"q{i}": float(v) for i, v in enumerate(values)}
        scores.append({"task": task, "metric": "ndcg_at_10", "value": float(values.mean()), "n": 200,
                       "per_query": per_query})
    train = None if name == "base" else {"cpu_s": 60.0, "wall_s": 40.0}
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{name}.json").write_text(json.dumps({
        "name": name, "machine": {"cpu": "test", "cores": 2, "precision": "fp32"}, "train": train,
        "scores": scores}))


def test_the_smallest_budget_that_no_task_tells_from_the_best_is_recommended(tmp_path):
    curve = _curve_module()
    _record(tmp_path, "base", {})
    _record(tmp_path, "paper_40_lr1e-05", {"scifact": -0.05, "heldout": -0.05})  # clearly worse
    _record(tmp_path, "paper_80_lr1e-05", {"heldout": 0.02}, noise=0.05)  # the best's noise
    _record(tmp_path, "paper_160_lr1e-05", {"heldout": 0.022}, noise=0.05)  # the best, by a little
    _record(tmp_path, "control_80_lr1e-05", {"heldout": 0.01})
    _record(tmp_path, "control_160_lr1e-05", {"heldout": 0.05})  # resolved above the 80 steps

    report = curve.collect(tmp_path)

    by_arm = {r["arm"]: r for r in report["recommended"]}
    assert by_arm["paper"]["best"] == "paper_160_lr1e-05"
    assert by_arm["paper"]["smallest"] == "paper_80_lr1e-05"
    assert by_arm["paper"]["vs_best"]["heldout"]["low"] < 0 < by_arm["paper"]["vs_best"]["heldout"]["high"]
    assert by_arm["control"] == {"arm": "control", "lr": 1e-05, "best": "control_160_lr1e-05",
                                 "smallest": "control_160_lr1e-05", "vs_best": {},
                                 "budgets": ["control_80_lr1e-05", "control_160_lr1e-05"]}


def test_an_arm_measured_at_one_budget_gets_no_recommendation(tmp_path):
    curve = _curve_module()
    _record(tmp_path, "base", {})
    _record(tmp_path, "paper_80_lr0.0001", {"heldout": 0.02})
    _record(tmp_path, "control_80_lr0.0001", {"heldout": 0.02})

    assert curve.collect(tmp_path)["recommended"] == []
