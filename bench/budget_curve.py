"""The budget curve (issue 42): what the paper preset gains over the base, and over plain
contrastive fine-tuning of the base (the control), as the training budget grows, on the real
biomedical pairs with the offline MiniLM.

    python bench/budget_curve.py [--work mosaic-budget] [--budgets 40,80,160,292] [--lr 1e-5[,3e-5]]
        [--lr-sweep 3e-5,1e-4 --lr-budget STEPS] [--arms paper,control] [--report-only] [--docs docs]

Every point is what a user runs, through the CLI:

- stage 1 once: ``mosaic vocab`` on the pairs' titles and abstracts (the defaults);
- one hard negative per pair, mined once with the base model (as the consistency filter gives
  them), shared by both arms so that they train on the same data;
- **paper @ N**: ``mosaic train --preset paper`` from stage 1, N steps per stage (joint, then
  contrastive), batch 32, documents cut to 128 tokens, validation every N/4 steps keeping
  each stage's best model;
- **default @ N** (``--arms``): what ``mosaic run`` trains now, ``--preset paper`` with its
  automatic warm-up (the head-only MLM stage before the joint one, for a base that ships no MLM
  head), N steps per domain stage; the paper arm then sets ``mlm_warmup=off``;
- **longwarm @ N** (``--arms``): the default with the warm-up's cap raised to 8·N steps
  (``mlm_warmup_steps``; it still stops once below its target): does a warm-up that reaches its
  target help the joint stage?
- **control @ N**: ``mosaic train --preset contrastive-only`` from the base, 2·N steps, the same
  settings: the same total number of optimizer steps and pairs seen, no new vocabulary, no MLM;
- each model scored by ``mosaic eval`` on SciFact (the 809 train claims over 5,183 abstracts)
  and the 256 held-out pairs (over a pool of 2,000 abstracts), NDCG@10 per query.

Two caches. WORK holds the models and logs (``points/<id>.json`` once trained, ``eval/<id>/``
once scored), so an interrupted run goes on where it stopped (an interrupted ``mosaic train``
resumes from its last checkpoint). RESULTS (``bench/results/budget_curve/``, kept in the
repository) holds one record per scored model: its per-query scores, CPU and wall time, the
machine and the precision it resolved. A point with a record is never trained again, so the
curve fills across sessions and machines even where WORK is lost. CPU time is the children's
user + system time (``getrusage``), wall time the elapsed time; both include validation.
Results: ``DOCS/data/budget_curve.json`` and ``DOCS/img/budget_curve.png``, with every point
against the base and against the control of the same budget and learning rate (95 % paired
bootstrap intervals), and the table printed; then, per arm and learning rate, the budget for a
default: the smallest that no other budget of the arm beats on any task (a paired interval
wholly above it).
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

from bench.machine import cpu_name  # noqa: E402
from mosaic_core.evaluate.report import paired_differences  # noqa: E402
from mosaic_core.evaluate.scoring import TaskScore  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
PAIRS = SHARED / "biomed" / "biomed_title_abstract.jsonl"
SCIFACT = SHARED / "scifact"
RESULTS = ROOT / "bench" / "results" / "budget_curve"
BASE = "offline:all-MiniLM-L6-v2"
COLS = ["--query-column", "title", "--document-column", "abstract"]
TRAIN_PAIRS = 9852 - 256 - 256
"""Pairs left for training once the test and validation pairs are held out."""
BATCH = 32
ARM_NAMES = {"paper": "paper preset", "default": "paper preset + warm-up (default)",
             "longwarm": "paper preset + warm-up of up to 8× the steps", "control": "control"}
LONG_WARMUP = 8
"""The ``longwarm`` arm's warm-up cap, in steps per domain stage (the default's is 1×)."""


def machine() -> dict:
    """This machine as a record names it: CPU, cores, the precision ``auto`` resolves here."""
    import torch

    from mosaic_core.modeling.encode import resolve_precision

    dtype = resolve_precision("auto", torch.device("cpu"))
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "precision": "bf16" if dtype is torch.bfloat16 else "fp32", "platform": platform.platform()}


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


def _once(marker: Path, cmd: list[str], log: Path, out: Path | None = None) -> dict:
    """``cmd``'s timing, cached in ``marker`` (the command is not run again once it exists);
    ``resumed`` when ``out`` already existed: an interrupted run went on, and the time is its rest."""
    if marker.is_file():
        return json.loads(marker.read_text())
    resumed = out is not None and out.exists()
    info = {"command": " ".join(cmd), **_timed(cmd, log), **({"resumed": True} if resumed else {})}
    _write(marker, info)
    return info


def _write(path: Path, data: dict) -> None:
    """``data`` as JSON at ``path``, atomically (a stopped run leaves no half record)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(path)


def _mosaic(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


def point_id(arm: str, steps: int, lr: float) -> str:
    return f"{arm}_{steps}_lr{lr:g}"


def _stage1(work: Path) -> tuple[Path, dict]:
    """Stage 1 on the pairs' titles and abstracts (cached in WORK); its folder and timing."""
    out = work / "stage1"
    cmd = _mosaic("vocab", "--corpus", str(PAIRS), "--columns", "title", "--columns", "abstract",
                  "--base-model", BASE, "--out", str(out))
    return out, _once(work / "points" / "stage1.json", cmd, work / "logs" / "stage1.log")


def _mine(work: Path) -> tuple[Path, dict]:
    """The pairs with one hard negative each, mined once with the base (cached); and its timing."""
    out = work / "mined.arrow"
    code = ("import sys; from tasks.negatives import with_hard_negatives as m; "
            f"m.fn({str(PAIRS)!r}, {BASE!r}, 'title', 'abstract', 1, (64, 128), {str(out)!r}, "
            f"{str(work / 'examples')!r})")
    return out, _once(work / "points" / "mined.json", [sys.executable, "-c", code], work / "logs" / "mine.log")


def _train(work: Path, arm: str, steps: int, lr: float) -> tuple[str, dict]:
    """Train one point (cached in WORK); the folder of its final model and the training's timing."""
    pid = point_id(arm, steps, lr)
    out = work / pid
    total = 2 * steps if arm == "control" else steps
    mined, _ = _mine(work)
    common = ["--pairs", str(mined), *COLS, "--out", str(out), "--set", f"max_steps={total}",
              "--set", f"batch_size={BATCH}", "--set", "document_max_length=128", "--set", "checkpoint_every=40",
              "--set", f"eval_every={max(total // 4, 10)}", "--set", "hard_negatives=1", "--set", f"lr={lr}"]
    if arm == "control":
        model, preset = BASE, "contrastive-only"
    else:  # the paper preset as published (no warm-up), as mosaic run trains it (default), a longer warm-up
        model, preset = str(_stage1(work)[0]), "paper"
        common += {"paper": ["--set", "mlm_warmup=off"],
                   "longwarm": ["--set", f"mlm_warmup_steps={LONG_WARMUP * steps}"]}.get(arm, [])
    timing = _once(work / "points" / f"{pid}.json", _mosaic("train", "--model", model, "--preset", preset, *common),
                   work / "logs" / f"{pid}.log", out)
    return str(final_stage(out)), timing


def final_stage(folder: Path) -> Path:
    """The last numbered stage folder of a ``mosaic train`` output: its final model."""
    return max(p for p in folder.iterdir() if p.is_dir() and p.name[:1].isdigit())


def _score(work: Path, results: Path, name: str, model: str, train: dict | None) -> None:
    """Score ``model`` on SciFact and the held-out pairs (cached in WORK) and keep its record in
    RESULTS: per-query NDCG@10, the training's and the scoring's timing, the machine."""
    out = work / "eval" / name
    timing = _once(work / "eval" / f"{name}.json",
                   _mosaic("eval", "--model", f"{name}={model}", "--beir", str(SCIFACT), "--heldout", str(PAIRS),
                           *COLS, "--pool", "2000", "--out", str(out)), work / "logs" / f"eval-{name}.log")
    scores = json.loads((out / "results.json").read_text())["scores"][name]
    for s in scores:
        s.pop("scores", None)
        s["per_query"] = {q: round(v, 6) for q, v in (s.get("per_query") or {}).items()}
    _write(results / f"{name}.json", {"name": name, "machine": machine(), "train": train, "eval": timing,
                                      "scores": scores})


def _record(results: Path, name: str) -> dict | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def run_points(work: Path, results: Path, budgets: list[int], lrs: list[float], sweep: list[float],
               lr_budget: int | None, arms: list[str]) -> None:
    """Train and score every point without a record: each arm at each budget and curve rate, and
    at ``lr_budget`` at each rate of ``sweep``."""
    (work / "logs").mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}", flush=True)
    if _record(results, "base") is None:
        _score(work, results, "base", BASE, None)
    if _record(results, "stage1") is None:
        path, timing = _stage1(work)
        _score(work, results, "stage1", str(path), timing)
    if _record(results, "mined") is None:
        _write(results / "mined.json", {"name": "mined", "machine": machine(), "train": _mine(work)[1]})
    plan = [(steps, lr) for lr in lrs for steps in budgets] + [(lr_budget, lr) for lr in sweep if lr_budget]
    for steps, lr in plan:
        for arm in arms:
            pid = point_id(arm, steps, lr)
            if _record(results, pid) is not None:
                continue
            print(f"{pid}: training", flush=True)
            model, timing = _train(work, arm, steps, lr)
            print(f"{pid}: scoring", flush=True)
            _score(work, results, pid, model, timing)


def _scores(record: dict | None) -> list[TaskScore] | None:
    return None if record is None else [TaskScore(**s) for s in record["scores"]]


def _diffs(model: list[TaskScore], reference: list[TaskScore]) -> dict[str, dict]:
    """``model`` − ``reference`` per task: the mean per-query difference and its 95 % paired interval."""
    return {d["task"]: d for d in paired_differences({"reference": reference, "model": model})}


def _against(model: list[TaskScore], reference: list[TaskScore]) -> dict[str, dict]:
    """:func:`_diffs` as the report shows it: × 100, rounded, and how many queries changed."""
    return {task: {k: round(100 * d[k], 2) for k in ("mean", "low", "high")} | {"changed": d["changed"]}
            for task, d in _diffs(model, reference).items()}


def collect(results: Path) -> dict:
    """Every scored point of RESULTS against the base and the control of its budget and rate."""
    records = {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}
    base, stage1 = _scores(records.get("base")), _scores(records.get("stage1"))
    if base is None:
        raise SystemExit(f"{results}: the base is not scored yet; run without --report-only first")
    shared = {k: records[k]["train"]["cpu_s"] for k in ("stage1", "mined") if k in records}
    points = []
    for name, rec in records.items():
        if "_lr" not in name:
            continue
        arm, steps, lr = name.split("_")
        scores = _scores(rec)
        control = _scores(records.get(point_id("control", int(steps), float(lr[2:]))))
        total = 2 * int(steps)
        points.append({
            "id": name, "arm": arm, "steps_per_stage": int(steps) if arm != "control" else total,
            "total_steps": total, "lr": float(lr[2:]), "epochs": round(total * BATCH / TRAIN_PAIRS, 3),
            "ndcg10": {s.task: round(100 * s.value, 2) for s in scores},
            "vs_base": _against(scores, base),
            "vs_control": _against(scores, control) if arm != "control" and control else None,
            "train_cpu_s": rec["train"]["cpu_s"], "train_wall_s": rec["train"]["wall_s"],
            "train_resumed": rec["train"].get("resumed", False),
            "cpu_s_with_shared": round(rec["train"]["cpu_s"] + shared.get("mined", 0.0)
                                       + (shared.get("stage1", 0.0) if arm != "control" else 0.0), 1),
            "machine": rec["machine"]["cpu"], "precision": rec["machine"]["precision"]})
    machines = sorted({(r["machine"]["cpu"], r["machine"]["cores"], r["machine"]["precision"])
                       for r in records.values()})
    return {"machines": [{"cpu": c, "cores": n, "precision": p} for c, n, p in machines],
            "setup": {"pairs": "biomed_title_abstract.jsonl (9,852; 9,340 train)", "batch_size": BATCH,
                      "document_max_length": 128, "hard_negatives": 1, "base": BASE},
            "base": {s.task: round(100 * s.value, 2) for s in base},
            "stage1": {s.task: round(100 * s.value, 2) for s in stage1} if stage1 else None,
            "stage1_vs_base": _against(stage1, base) if stage1 else None,
            "shared_cpu_s": shared,
            "points": sorted(points, key=lambda p: (p["lr"], p["arm"], p["total_steps"])),
            "recommended": recommend(points, {k: _scores(r) for k, r in records.items() if "_lr" in k}, base)}


def recommend(points: list[dict], scores: dict[str, list[TaskScore]], base: list[TaskScore]) -> list[dict]:
    """The budget for a default, per arm and learning rate measured at two budgets or more (on
    the points scored on every task the base is): the smallest budget that no other budget of the
    arm beats on any task, a paired 95 % interval wholly above it. Tested against the best point
    alone, a noisy best could pass a budget that a nearer one beats. Also the best (the highest
    gain over the base summed over the tasks) with the recommended budget against it, and which
    budgets are beaten by which; ``smallest`` is None where every budget is beaten."""
    tasks = {s.task for s in base if s.per_query}
    out = []
    for arm, lr in sorted({(p["arm"], p["lr"]) for p in points}):
        line = [p["id"] for p in sorted(points, key=lambda p: p["total_steps"])
                if p["arm"] == arm and p["lr"] == lr and tasks <= set(p["vs_base"])]
        if len(line) < 2:
            continue
        gain = {pid: sum(d["mean"] for d in _diffs(scores[pid], base).values()) for pid in line}
        best = max(line, key=gain.__getitem__)
        beaten = {pid: sorted({other for other in line if other != pid
                               for d in _diffs(scores[pid], scores[other]).values() if d["high"] < 0})
                  for pid in line}
        smallest = next((pid for pid in line if not beaten[pid]), None)
        out.append({"arm": arm, "lr": lr, "budgets": line, "best": best, "smallest": smallest,
                    "vs_best": _against(scores[smallest], scores[best]) if smallest not in (None, best) else {},
                    "beaten_by": {pid: by for pid, by in beaten.items() if by}})
    return out


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
        hours = f"{p['train_cpu_s'] / 3600:.2f}" + (" (resumed: the rest only)" if p["train_resumed"] else "")
        lines.append("| " + " | ".join(row + [hours]) + " |")
    return "\n".join(lines)


def plot(curve: dict, path: Path) -> None:
    """Each arm's difference to the base against the budget, one line per learning rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4), sharex=True)
    titles = {"scifact": "SciFact (809 claims)", "heldout": "held-out pairs (256 titles)"}
    lrs = sorted({p["lr"] for p in curve["points"]})
    colours = dict(zip(lrs, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    for ax, task in zip(axes, titles, strict=True):
        for k, lr in enumerate(lrs):
            spread = 1.02 ** (k - (len(lrs) - 1) / 2)  # the rates side by side, not on top of each other
            for arm, style, shift in (("paper", "o-", 0.92 * spread), ("default", "^:", spread),
                                      ("longwarm", "v-.", 1.04 * spread), ("control", "s--", 1.08 * spread)):
                pts = [p for p in curve["points"] if p["arm"] == arm and p["lr"] == lr and task in p["vs_base"]]
                if not pts:
                    continue
                d = [p["vs_base"][task] for p in pts]
                ax.errorbar([shift * p["epochs"] for p in pts], [x["mean"] for x in d], capsize=3, fmt=style,
                            color=colours[lr], yerr=[[x["mean"] - x["low"] for x in d],
                                                     [x["high"] - x["mean"] for x in d]],
                            label=f"{ARM_NAMES[arm]}, lr {lr:g}")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ticks = sorted({(p["epochs"], p["total_steps"]) for p in curve["points"]})
        ax.set_xticks([e for e, _ in ticks], [f"{e:.2f}\n{n // 2} + {n // 2}\n{n}" for e, n in ticks], fontsize=8)
        ax.minorticks_off()
        if ticks:
            ax.set_xlim(ticks[0][0] / 1.3, ticks[-1][0] * 1.3)
        ax.set_title(f"{titles[task]}: NDCG@10 − base (× 100)", fontsize=10)
        ax.set_xlabel("passes over the 9,340 pairs; steps: paper (per stage), control", fontsize=8)
    axes[0].set_ylabel("difference to the base, 95 % paired interval")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=7, loc="best")
    where = "; ".join(f"{m['cpu']}, {m['cores']} cores, {m['precision']}" for m in curve["machines"])
    fig.suptitle(f"Budget curve, batch 32, one hard negative: offline MiniLM on the real biomedical pairs ({where})",
                 fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("mosaic-budget"), help="cache of models, scores, logs")
    parser.add_argument("--results", type=Path, default=RESULTS, help="one record per scored model (kept)")
    parser.add_argument("--budgets", default="40,80,160,292", help="steps per stage (292: one epoch in all)")
    parser.add_argument("--lr", default="1e-5", help="peak learning rate(s) of the curve, comma-separated")
    parser.add_argument("--lr-sweep", default="", help="further learning rates, at --lr-budget")
    parser.add_argument("--lr-budget", type=int, default=None, help="steps per stage of the learning-rate sweep")
    parser.add_argument("--arms", default="paper,control", help="which arms, in the order they train: "
                        "paper, default (paper with the automatic warm-up), longwarm (its cap 8×), control")
    parser.add_argument("--report-only", action="store_true", help="train nothing: tabulate the recorded points")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="where data/ and img/ are written")
    args = parser.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    if set(arms) - set(ARM_NAMES):
        unknown = ", ".join(sorted(set(arms) - set(ARM_NAMES)))
        parser.error(f"--arms: {unknown} unknown; choose from {', '.join(ARM_NAMES)}")
    if not args.report_only:
        for path in (PAIRS, SCIFACT):
            if not path.exists():
                raise SystemExit(f"{path}: not found (the real data of ../shared/data)")
        run_points(args.work.resolve(), args.results.resolve(), [int(x) for x in args.budgets.split(",") if x],
                   [float(x) for x in args.lr.split(",") if x], [float(x) for x in args.lr_sweep.split(",") if x],
                   args.lr_budget, arms)
    curve = collect(args.results.resolve())
    (args.docs / "data").mkdir(parents=True, exist_ok=True)
    (args.docs / "data" / "budget_curve.json").write_text(json.dumps(curve, indent=1) + "\n")
    plot(curve, args.docs / "img" / "budget_curve.png")
    print(table(curve))
    for r in curve["recommended"]:
        print(f"\n{r['arm']}, lr {r['lr']:g} ({', '.join(r['budgets'])}):")
        for pid, by in r["beaten_by"].items():
            print(f"  {pid} is beaten by {', '.join(by)} (on some task, resolved)")
        if r["smallest"] is None:
            print(f"  every budget is beaten on some task; no default from this curve (best: {r['best']})")
            continue
        tell = "; ".join(f"{task} {cell(r['vs_best'], task)}" for task in r["vs_best"])
        print(f"  the smallest budget no other beats: {r['smallest']} "
              + (f"(against the best, {r['best']}: {tell})" if tell else "(the best itself)"))


if __name__ == "__main__":
    main()
