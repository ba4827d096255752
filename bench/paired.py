"""Paired per-query differences between models scored by separate `mosaic eval` runs: each
model against the first, per retrieval task, with the 95 % paired bootstrap interval the
evaluation report gives models scored in one run (`mosaic_core.evaluate.report.paired_differences`).

    python bench/paired.py EVAL_DIR [EVAL_DIR ...] [--pool]

Each EVAL_DIR is a `mosaic eval --out` directory (its results.json); the first model of the
first directory is the reference. The runs must score the same queries (the same task data
and `--pool`). With --pool, every model after the reference is taken as a seed of one variant:
their per-query differences are averaged before resampling, which is the interval of the
variant's mean over those seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mosaic_core.evaluate.report import differences_table, paired_differences  # noqa: E402
from mosaic_core.evaluate.scoring import TaskScore  # noqa: E402


def load(dirs: list[Path]) -> dict[str, list[TaskScore]]:
    scores: dict[str, list[TaskScore]] = {}
    for d in dirs:
        path = d / "results.json"
        if not path.is_file():
            raise SystemExit(f"{path}: not found; pass `mosaic eval --out` directories")
        for model, tasks in json.loads(path.read_text())["scores"].items():
            if model in scores:
                raise SystemExit(f"{path}: model {model!r} is already in an earlier directory")
            scores[model] = [TaskScore(**t) for t in tasks]
    return scores


def pooled(scores: dict[str, list[TaskScore]]) -> dict[str, list[TaskScore]]:
    """The reference and one model whose per-query scores are the mean over the others."""
    reference, *seeds = scores
    out = []
    for task in (s for s in scores[seeds[0]] if s.per_query):
        runs = [s.per_query for m in seeds for s in scores[m] if s.task == task.task and s.per_query]
        if len(runs) != len(seeds):
            raise SystemExit(f"task {task.task}: not scored per query by every model")
        per_query = {q: statistics.fmean(r[q] for r in runs) for q in runs[0]}
        out.append(TaskScore(task.task, task.metric, statistics.fmean(per_query.values()), len(per_query),
                             per_query=per_query))
    return {reference: scores[reference], "mean of " + ", ".join(seeds): out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--pool", action="store_true", help="average the models after the first (seeds) first")
    args = parser.parse_args()
    scores = load(args.dirs)
    if len(scores) < 2:
        raise SystemExit("need at least two models")
    print(differences_table(paired_differences(pooled(scores) if args.pool else scores)))


if __name__ == "__main__":
    main()
