"""Does a glossary make the adapted model win where words are new? (issue 65)

    python bench/glossary.py [--work /work/runs/glossary] [--seeds 0,1,2] [--arms without,with]
        [--real] [--mesh bench/data/mesh/desc_subset.xml.gz] [--report-only]

Every point is what a user runs, through the CLI, each in a data root of its own under WORK:

- **the demo** (``mosaic run --seed S``): its invented words, with the glossary the demo writes
  (``with``: stage 1 keeps every invented word and learns its row from its definition, the
  dictionary stage, definition pairs for both arms) and without it (``without``:
  ``--set glossary=null``, the run as it was before the glossary existed);
- **the real pairs** (``--real``): the 9,852 biomedical title/abstract pairs as own pairs with
  the offline MiniLM, scored on SciFact's claims and the held-out pairs, without a glossary and
  with the MeSH extract (``--mesh``).

Each run trains the adapted model and the control (plain fine-tuning of the base on the same
pairs and steps; with a glossary, the definition pairs too). Its report's per-query NDCG@10
is kept in RESULTS (``bench/results/glossary/<point>.json``: the base's, the control's and
the adapted model's, with the machine, the precision it resolved and the wall time), so a point
with a record is never run again. The tables: per point the adapted model against the control,
and each arm against the other (the adapted models; the controls), with 95 % paired bootstrap
intervals over the task's queries.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.budget_curve import _mosaic, _once, _write, machine  # noqa: E402
from mosaic_core.evaluate.report import paired_differences  # noqa: E402
from mosaic_core.evaluate.scoring import TaskScore  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "bench" / "results" / "glossary"
PAIRS = SHARED / "biomed" / "biomed_title_abstract.jsonl"
SCIFACT = SHARED / "scifact"
MESH = ROOT / "bench" / "data" / "mesh" / "desc_subset.xml.gz"
BASE = "offline:all-MiniLM-L6-v2"


ARMS = {"without": ["--set", "glossary=null"], "with": [],
        "no-rows": ["--set", "glossary.define_steps=0"], "no-dictionary": ["--set", "glossary.dictionary.epochs=0"]}
"""What each arm sets on the demo's run: no glossary; the glossary as the demo uses it; without its
rows learnt from the definitions (the candidates, the dictionary stage and the definition pairs
only); without the dictionary stage."""


def demo_command(root: Path, seed: int, arm: str) -> list[str]:
    return _mosaic("run", "-d", str(root), "--seed", str(seed), *ARMS[arm])


def real_command(root: Path, arm: str, mesh: Path) -> list[str]:
    scifact = f"[{{kind: beir, name: scifact, path: {SCIFACT}}}]"
    return _mosaic("run", "-d", str(root), "--pairs", str(PAIRS), "--query-column", "title", "--document-column",
                   "abstract", "--base-model", BASE, "--domain", "biomedicine", "--set", f"eval_tasks={scifact}",
                   *(["--glossary", str(mesh)] if arm == "with" else []))


def record(work: Path, results: Path, point: str, command: list[str]) -> dict:
    """The point's record in RESULTS, run first when there is none (its data root WORK/<point>)."""
    path = results / f"{point}.json"
    if path.is_file():
        return json.loads(path.read_text())
    root = work / point
    timing = _once(work / "points" / f"{point}.json", command, work / "logs" / f"{point}.log")
    report = json.loads((root / "report" / "results.json").read_text())
    adapted = report["control_differences"][0]["model"]
    keep = {"base": "base", "control": "control", "adapted": adapted}
    vocab = json.loads((root / "models" / "stage1" / "vocab_report.json").read_text())
    glossary = vocab.get("glossary") or {}
    data = {"point": point, "machine": machine(), "run": timing, "adapted_stage": adapted,
            "decision": report["decision"]["message"], "tokens_added": vocab["tokens_added"],
            "glossary_tokens": [a["token"] for a in glossary.get("added", [])],
            "scores": {name: [{k: v for k, v in s.items() if k != "scores"} for s in report["scores"][model]]
                       for name, model in keep.items()}}
    _write(path, data)
    return data


def scores(rec: dict, model: str) -> list[TaskScore]:
    return [TaskScore(**s) for s in rec["scores"][model]]


def _row(label: str, diff: dict) -> str:
    return (f"| {label} | {diff['task']} | {100 * diff['mean']:+.2f} | [{100 * diff['low']:+.2f}, "
            f"{100 * diff['high']:+.2f}] | {'yes' if diff['low'] > 0 else 'no'} |")


def table(records: dict[str, dict], pairs: list[tuple[str, str, str]]) -> list[str]:
    """Markdown rows: for each (label, point, arm): the adapted model against the control of the
    same run; and for each point the arms against each other."""
    lines = ["| comparison | task | Δ NDCG@10 × 100 | 95 % interval | above 0 |", "| --- | --- | ---: | --- | --- |"]
    for label, point in pairs:
        rec = records.get(point)
        if rec is None:
            continue
        both = {"control": scores(rec, "control"), "adapted": scores(rec, "adapted")}
        lines += [_row(f"{label}: adapted − control", d) for d in paired_differences(both, reference="control")]
    return lines


def arms_table(records: dict[str, dict], points: list[tuple[str, str, str]]) -> list[str]:
    """Markdown rows: each model of the ``with`` run against the same model of the ``without`` run."""
    lines = ["| comparison | task | Δ NDCG@10 × 100 | 95 % interval | above 0 |", "| --- | --- | ---: | --- | --- |"]
    for label, without, with_ in points:
        if without not in records or with_ not in records:
            continue
        for model in ("adapted", "control"):
            both = {"without": scores(records[without], model), "with": scores(records[with_], model)}
            lines += [_row(f"{label}: {model}, with − without the glossary", d)
                      for d in paired_differences(both, reference="without")]
    return lines


def scores_table(records: dict[str, dict]) -> list[str]:
    lines = ["| point | tokens (glossary) | base | control | adapted | published |",
             "| --- | ---: | --- | --- | --- | --- |"]
    for point, rec in records.items():
        cells = [" / ".join(f"{100 * s.value:.2f}" for s in scores(rec, m)) for m in ("base", "control", "adapted")]
        lines.append(f"| {point} | {rec['tokens_added']} ({len(rec['glossary_tokens'])}) | {' | '.join(cells)} | "
                     f"{rec['decision']} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/work/runs/glossary"), help="data roots and logs")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the records (kept in the repository)")
    parser.add_argument("--seeds", default="0,1,2", help="demo seeds, comma-separated ('': no demo point)")
    parser.add_argument("--arms", default="without,with", help="without and/or with the glossary")
    parser.add_argument("--real", action="store_true", help="also the real biomedical pairs with MeSH")
    parser.add_argument("--mesh", type=Path, default=MESH, help="the MeSH descriptor extract of --real")
    parser.add_argument("--report-only", action="store_true", help="print the tables from the records only")
    args = parser.parse_args()
    seeds, arms = [int(s) for s in args.seeds.split(",") if s], args.arms.split(",")
    (args.work / "logs").mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}", flush=True)
    points = {f"demo-s{s}-{a}": demo_command(args.work / f"demo-s{s}-{a}", s, a) for s in seeds for a in arms}
    if args.real:
        points.update({f"real-{a}": real_command(args.work / f"real-{a}", a, args.mesh.resolve()) for a in arms})
    records = {}
    for point, command in points.items():
        path = args.results / f"{point}.json"
        if args.report_only:
            if path.is_file():
                records[point] = json.loads(path.read_text())
            continue
        records[point] = record(args.work, args.results, point, command)
        print(f"{point}: {records[point]['run']['wall_s']:.0f} s", flush=True)
    labels = [(p, p) for p in records]
    print("\n".join(["", *scores_table(records), "", *table(records, labels), "",
                     *arms_table(records, [(p.rsplit("-", 1)[0], f"{p.rsplit('-', 1)[0]}-without",
                                            f"{p.rsplit('-', 1)[0]}-with") for p in records if p.endswith("-with")])]))


if __name__ == "__main__":
    main()
