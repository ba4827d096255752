"""The budget curve (issue 42): what the paper preset gains over the base, and over plain
contrastive fine-tuning of the base (the control), as the training budget grows, on the real
biomedical pairs with the offline MiniLM.

    python bench/budget_curve.py [--work mosaic-budget] [--budgets 40,80,160,292] [--lr 1e-5]
        [--lr-sweep 3e-5,1e-4 --lr-budget STEPS] [--report-only] [--docs docs]

Every point is what a user runs, through the CLI:

- stage 1 once: ``mosaic vocab`` on the pairs' titles and abstracts (the defaults);
- one hard negative per pair, mined once with the base model (as the consistency filter gives
  them), shared by both arms so that they train on the same data;
- **paper @ N**: ``mosaic train --preset paper`` from stage 1, N steps per stage (joint, then
  contrastive), batch 32, documents cut to 128 tokens, validation every N/4 steps keeping
  each stage's best model;
- **control @ N**: ``mosaic train --preset contrastive-only`` from the base, 2·N steps, the same
  settings: the same total number of optimizer steps and pairs seen, no new vocabulary, no MLM;
- each model scored by ``mosaic eval`` on SciFact (the 809 train claims over 5,183 abstracts)
  and the 256 held-out pairs (over a pool of 2,000 abstracts), NDCG@10 per query.

Each point is cached in WORK (``points/<id>.json`` once trained, ``eval/<id>/results.json``
once scored), so the script can be stopped at any time and rerun to go on (an interrupted
``mosaic train`` resumes from its last checkpoint): the curve fills across sessions. CPU time
is the children's user + system time (``getrusage``), wall time the elapsed time; both include
validation. Results: ``DOCS/data/budget_curve.json`` and ``DOCS/img/budget_curve.png``, with
every point against the base and against the control of the same budget and learning rate
(95 % paired bootstrap intervals), and the table printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mosaic_core.evaluate.report import paired_differences  # noqa: E402
from mosaic_core.evaluate.scoring import TaskScore  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
PAIRS = SHARED / "biomed" / "biomed_title_abstract.jsonl"
SCIFACT = SHARED / "scifact"
BASE = "offline:all-MiniLM-L6-v2"
COLS = ["--query-column", "title", "--document-column", "abstract"]
TRAIN_PAIRS = 9852 - 256 - 256
"""Pairs left for training once the test and validation pairs are held out."""
BATCH = 32


def _timed(cmd: list[str], log: Path) -> dict:
    """Run ``cmd`` (output to ``log``); its CPU (children's user + system) and wall seconds."""
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env={
            **os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}; see {log}")
    return {"cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
            "wall_s": round(time.perf_counter() - t0, 1)}


def _once(marker: Path, cmd: list[str], log: Path) -> dict:
    """``cmd``'s timing, cached in ``marker`` (the command is not run again once it exists)."""
    if marker.is_file():
        return json.loads(marker.read_text())
    info = {"command": " ".join(cmd), **_timed(cmd, log)}
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(info, indent=1))
    return info


def _mosaic(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


def point_id(arm: str, steps: int, lr: float) -> str:
    return f"{arm}_{steps}_lr{lr:g}"


def _train(work: Path, arm: str, steps: int, lr: float, mined: Path) -> str:
    """Train one point (cached); the folder of its final model."""
    pid = point_id(arm, steps, lr)
    out = work / pid
    total = 2 * steps if arm == "control" else steps
    common = ["--pairs", str(mined), *COLS, "--out", str(out), "--set", f"max_steps={total}",
              "--set", f"batch_size={BATCH}", "--set", "document_max_length=128", "--set", "checkpoint_every=40",
              "--set", f"eval_every={max(total // 4, 10)}", "--set", "hard_negatives=1", "--set", f"lr={lr}"]
    model, preset, final = ((str(work / "stage1"), "paper", "2-contrastive") if arm == "paper"
                            else (BASE, "contrastive-only", "1-contrastive"))
    _once(work / "points" / f"{pid}.json", _mosaic("train", "--model", model, "--preset", preset, *common),
          work / "logs" / f"{pid}.log")
    return str(out / final)


def _evaluate(work: Path, name: str, model: str) -> Path:
    """Score ``model`` on SciFact and the held-out pairs (cached); its results.json."""
    out = work / "eval" / name
    _once(work / "eval" / f"{name}.json",
          _mosaic("eval", "--model", f"{name}={model}", "--beir", str(SCIFACT), "--heldout", str(PAIRS), *COLS,
                  "--pool", "2000", "--out", str(out)), work / "logs" / f"eval-{name}.log")
    return out / "results.json"


def _mine(work: Path) -> Path:
    """The pairs with one hard negative each, mined once with the base (cached)."""
    out = work / "mined.jsonl"
    marker = work / "points" / "mined.json"
    if not marker.is_file():
        code = ("import sys; from tasks.negatives import with_hard_negatives as m; "
                f"m.fn({str(PAIRS)!r}, {BASE!r}, 'title', 'abstract', 1, (64, 128), {str(out)!r})")
        _once(marker, [sys.executable, "-c", code], work / "logs" / "mine.log")
    return out


def run_points(work: Path, budgets: list[int], lrs: list[float], lr_budget: int | None) -> None:
    """Train and score every missing point: both arms at each budget at lrs[0], and both arms at
    ``lr_budget`` at each further learning rate."""
    (work / "logs").mkdir(parents=True, exist_ok=True)
    _once(work / "points" / "stage1.json", _mosaic("vocab", "--corpus", str(PAIRS), "--columns", "title", "--columns",
                                                   "abstract", "--base-model", BASE, "--out", str(work / "stage1")),
          work / "logs" / "stage1.log")
    _evaluate(work, "base", BASE)
    _evaluate(work, "stage1", str(work / "stage1"))
    mined = _mine(work)
    plan = [(steps, lrs[0]) for steps in budgets] + [(lr_budget, lr) for lr in lrs[1:] if lr_budget]
    for steps, lr in plan:
        for arm in ("paper", "control"):
            print(f"{point_id(arm, steps, lr)}: training", flush=True)
            model = _train(work, arm, steps, lr, mined)
            print(f"{point_id(arm, steps, lr)}: scoring", flush=True)
            _evaluate(work, point_id(arm, steps, lr), model)


def _scores(work: Path, name: str) -> list[TaskScore] | None:
    path = work / "eval" / name / "results.json"
    if not path.is_file():
        return None
    return [TaskScore(**t) for t in json.loads(path.read_text())["scores"][name]]


def _against(model: list[TaskScore], reference: list[TaskScore]) -> dict[str, dict]:
    diffs = paired_differences({"reference": reference, "model": model})
    return {d["task"]: {k: round(100 * d[k], 2) for k in ("mean", "low", "high")} | {"changed": d["changed"]}
            for d in diffs}


def collect(work: Path) -> dict:
    """Every scored point of WORK against the base and the control of its budget and rate."""
    base, stage1 = _scores(work, "base"), _scores(work, "stage1")
    if base is None:
        raise SystemExit(f"{work}: the base is not scored yet; run without --report-only first")
    timing = {p.stem: json.loads(p.read_text()) for p in (work / "points").glob("*.json")}
    points = []
    for marker in sorted((work / "points").glob("*_lr*.json")):
        arm, steps, lr = marker.stem.split("_")
        scores = _scores(work, marker.stem)
        if scores is None:
            continue
        control = _scores(work, point_id("control", int(steps), float(lr[2:])))
        total = 2 * int(steps)
        cpu = timing[marker.stem]["cpu_s"] + timing["mined"]["cpu_s"] + (
            timing["stage1"]["cpu_s"] if arm == "paper" else 0.0)
        points.append({
            "id": marker.stem, "arm": arm, "steps_per_stage": int(steps) if arm == "paper" else total,
            "total_steps": total, "lr": float(lr[2:]), "epochs": round(total * BATCH / TRAIN_PAIRS, 3),
            "ndcg10": {s.task: round(100 * s.value, 2) for s in scores},
            "vs_base": _against(scores, base),
            "vs_control": _against(scores, control) if arm == "paper" and control else None,
            "train_cpu_s": timing[marker.stem]["cpu_s"], "train_wall_s": timing[marker.stem]["wall_s"],
            "cpu_s_with_shared": round(cpu, 1)})
    return {"machine": {"cpu": _cpu_name(), "cores": os.cpu_count(), "platform": platform.platform()},
            "setup": {"pairs": "biomed_title_abstract.jsonl (9,852; 9,340 train)", "batch_size": BATCH,
                      "document_max_length": 128, "hard_negatives": 1, "base": BASE},
            "base": {s.task: round(100 * s.value, 2) for s in base},
            "stage1": {s.task: round(100 * s.value, 2) for s in stage1} if stage1 else None,
            "stage1_vs_base": _against(stage1, base) if stage1 else None,
            "shared_cpu_s": {k: timing[k]["cpu_s"] for k in ("stage1", "mined") if k in timing},
            "points": sorted(points, key=lambda p: (p["lr"], p["arm"], p["total_steps"]))}


def _cpu_name() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def cell(d: dict | None, task: str) -> str:
    """A difference and its interval (× 100), or – when not measured."""
    if not d or task not in d:
        return "–"
    x = d[task]
    return f"{x['mean']:+.2f} [{x['low']:+.2f}, {x['high']:+.2f}]"


def table(curve: dict) -> str:
    """The curve as Markdown: NDCG@10 × 100 and each point's differences, train CPU hours."""
    lines = ["| point | epochs | SciFact | Δ base | Δ control | held-out | Δ base | Δ control | train CPU h |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
             f"| base | 0 | {curve['base'].get('scifact', float('nan')):.2f} | | | "
             f"{curve['base'].get('heldout', float('nan')):.2f} | | | |"]
    if curve["stage1"]:
        d = curve["stage1_vs_base"]
        lines.append(f"| stage 1 | 0 | {curve['stage1'].get('scifact', float('nan')):.2f} | {cell(d, 'scifact')} | | "
                     f"{curve['stage1'].get('heldout', float('nan')):.2f} | {cell(d, 'heldout')} | | "
                     f"{curve['shared_cpu_s'].get('stage1', 0) / 3600:.2f} |")
    for p in curve["points"]:
        row = [p["id"], f"{p['epochs']:.2f}"]
        for task in ("scifact", "heldout"):
            row += [f"{p['ndcg10'].get(task, float('nan')):.2f}", cell(p["vs_base"], task), cell(p["vs_control"], task)]
        lines.append("| " + " | ".join(row + [f"{p['train_cpu_s'] / 3600:.2f}"]) + " |")
    return "\n".join(lines)


def plot(curve: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    lr0 = min((p["lr"] for p in curve["points"]), default=0.0)
    for ax, task in zip(axes, ("scifact", "heldout"), strict=True):
        for arm, style in (("paper", "o-"), ("control", "s--")):
            pts = [p for p in curve["points"] if p["arm"] == arm and p["lr"] == lr0 and task in p["vs_base"]]
            if not pts:
                continue
            x = [p["epochs"] for p in pts]
            y = [p["vs_base"][task]["mean"] for p in pts]
            err = [[p["vs_base"][task]["mean"] - p["vs_base"][task]["low"] for p in pts],
                   [p["vs_base"][task]["high"] - p["vs_base"][task]["mean"] for p in pts]]
            ax.errorbar(x, y, yerr=err, fmt=style, capsize=3,
                        label=f"{'paper preset' if arm == 'paper' else 'control (contrastive only)'}, lr {lr0:g}")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"{task}: NDCG@10 − base (× 100, 95 % interval)")
        ax.set_xlabel("epochs of the 9,340 training pairs (total optimizer steps × 32 / 9,340)")
    axes[0].set_ylabel("difference to the base")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Budget curve, offline MiniLM on the biomedical pairs ({curve['machine']['cpu']}, "
                 f"{curve['machine']['cores']} cores)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("mosaic-budget"), help="cache of models, scores, logs")
    parser.add_argument("--budgets", default="40,80,160,292", help="steps per stage (292: one epoch in all)")
    parser.add_argument("--lr", default="1e-5", help="peak learning rate of the curve")
    parser.add_argument("--lr-sweep", default="", help="further learning rates, at --lr-budget")
    parser.add_argument("--lr-budget", type=int, default=None, help="steps per stage of the learning-rate sweep")
    parser.add_argument("--report-only", action="store_true", help="train nothing: tabulate the cached points")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="where data/ and img/ are written")
    args = parser.parse_args()
    for path in (PAIRS, SCIFACT):
        if not path.exists():
            raise SystemExit(f"{path}: not found (the real data of ../shared/data)")
    args.work = args.work.resolve()
    lrs = [float(args.lr), *(float(x) for x in args.lr_sweep.split(",") if x)]
    if not args.report_only:
        run_points(args.work, [int(x) for x in args.budgets.split(",")], lrs, args.lr_budget)
    curve = collect(args.work)
    (args.docs / "data").mkdir(parents=True, exist_ok=True)
    (args.docs / "data" / "budget_curve.json").write_text(json.dumps(curve, indent=1) + "\n")
    plot(curve, args.docs / "img" / "budget_curve.png")
    print(table(curve))


if __name__ == "__main__":
    main()
