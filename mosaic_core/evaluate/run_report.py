"""The run report: one page with the whole story of a pipeline run, for a person deciding
whether to trust tonight's rebuild. It leads with the verdict (what adaptation did, in words,
and whether the model was published), then the evaluation table with its change against the
base model, the data funnel, stage 1, the training curves, and the charts.

Markdown (``report.md``) and a self-contained HTML page (``report.html``: images embedded,
no external resources), both from the same Markdown.
"""

from __future__ import annotations

import base64
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import markdown
from matplotlib.figure import Figure

from mosaic_core.evaluate.report import bar_chart, box_plot, differences_table, grid, paired_differences
from mosaic_core.evaluate.scoring import TaskScore
from mosaic_core.modeling.losses import LOSS_TERMS
from mosaic_core.trainer.heldout import SELECT_METRIC


@dataclass
class RunStory:
    """What a run did, gathered by the pipeline from what its steps returned."""

    candidate: str
    """The model the run produced (the name it has in ``scores``)."""
    base: str
    scores: dict[str, list[TaskScore]]
    decision: dict | None = None
    funnel: list[tuple[str, int, str]] = field(default_factory=list)
    """(step, rows after it, what it dropped)."""
    heldout: dict | None = None
    """The test set and how it changed since the data root's last run (``tasks/heldout.py: hold_out``)."""
    vocab: dict | None = None
    stages: list[dict] = field(default_factory=list)
    task_words: dict[str, str] = field(default_factory=dict)
    """task → what it asks, in words a newcomer understands."""
    metadata: dict = field(default_factory=dict)
    control: str | None = None
    """The plain fine-tuning control's name in ``scores``, when the run trained one."""
    glossary: list[dict] = field(default_factory=list)
    """What the run taught the glossary terms stage 1 added (``tasks.glossary.describe_terms``)."""
    tick: dict | None = None
    """Which tick the run was (a full rebuild or an update tick), why, and what it trained on
    (``tasks/continual.py: prepare_tick``'s plan, with ``words``: the line the report shows)."""

    @cached_property
    def differences(self) -> list[dict]:
        """Every model against the base, per query (:func:`mosaic_core.evaluate.report.paired_differences`);
        bootstrapped once, for the headline, the report's table and results.json."""
        return paired_differences(self.scores, reference=self.base)

    @cached_property
    def control_differences(self) -> list[dict]:
        """The candidate against the control, per query (empty without a control)."""
        if self.control is None or self.control not in self.scores:
            return []
        pair = {m: self.scores[m] for m in (self.control, self.candidate)}
        return paired_differences(pair, reference=self.control)


def headline(story: RunStory) -> list[str]:
    """Sentences: the candidate against the base (and the control, when the run trained one),
    task by task, in plain words, with the paired interval of the difference where the task is
    scored per query."""
    lines = _against(story, story.base, "the base", "the base model", story.differences)
    if story.control is not None:
        lines += _against(story, story.control, "the control", "plain fine-tuning of the base (the control)",
                          story.control_differences)
    return lines


def _against(story: RunStory, reference: str, short: str, long: str, differences: list[dict]) -> list[str]:
    _, tasks, values = grid(story.scores)
    intervals = {d["task"]: d for d in differences if d["model"] == story.candidate}
    lines = []
    for task in tasks:
        mine, ref = values.get((story.candidate, task)), values.get((reference, task))
        if mine is None or ref is None:
            continue
        what = story.task_words.get(task, f"on {task}")
        verdict = (f"better than {short}" if mine > ref else f"no better than {short}" if mine == ref
                   else f"worse than {short}")
        change = f"{100 * (mine - ref):+.1f}"
        d = intervals.get(task)
        if d:
            change += f"; 95 % interval {100 * d['low']:+.1f} to {100 * d['high']:+.1f} over {d['queries']} queries"
            if d["low"] <= 0 <= d["high"] and mine != ref:
                verdict = (f"{'above' if mine > ref else 'below'} {short} by less than these queries can tell "
                           "from no change")
        lines.append(f"**{task}** — {what}: the adapted model scores **{100 * mine:.1f}**, {long} "
                     f"{100 * ref:.1f} ({change}): {verdict}.")
    return lines


def delta_table(story: RunStory) -> str:
    """Every model × task (main score × 100) with its change against the base model."""
    models, tasks, values = grid(story.scores)
    head = "| model | " + " | ".join(f"{t} | Δ" for t in tasks) + " |"
    rows = [head, "|" + " --- |" * (1 + 2 * len(tasks))]
    for m in models:
        cells = []
        for t in tasks:
            v, b = values.get((m, t)), values.get((story.base, t))
            cells += ["–" if v is None else f"{100 * v:.2f}",
                      "" if v is None or b is None or m == story.base else f"{100 * (v - b):+.2f}"]
        name = f"**{m}**" if m == story.candidate else m
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def training_curves(stages: list[dict], out_dir: Path) -> list[Path]:
    """One PNG per stage: its loss terms and validation NDCG@10 against the step (train_log.jsonl)."""
    paths = []
    for s in stages:
        log_path = Path(s["out_dir"]) / "train_log.jsonl"
        if not log_path.is_file():
            continue
        records = [json.loads(line) for line in log_path.read_text().splitlines()]
        fig = Figure(figsize=(6, 3.2))
        ax = fig.subplots()
        for term in ("total", *LOSS_TERMS):
            points = [(r["step"], r[term]) for r in records if r.get(term)]
            if points:
                ax.plot(*zip(*points, strict=True), label=term)
        ax.set_xlabel("step")
        ax.set_ylabel("loss (mean of the log window)")
        evals = [(e["step"], e[SELECT_METRIC]) for e in s.get("evals", []) if SELECT_METRIC in e]
        if evals:
            ax2 = ax.twinx()
            ax2.plot(*zip(*evals, strict=True), "o--", color="black", label="validation NDCG@10")
            ax2.set_ylabel("validation NDCG@10")
            ax2.legend(loc="upper right", fontsize=7)
        ax.legend(loc="upper left", fontsize=7)
        ax.set_title(f"stage {s['stage']}" + (f" (kept step {s['best_step']})" if s.get("best_step") is not None
                                              else ""), fontsize=9)
        fig.tight_layout()
        path = out_dir / f"curve-{re.sub(r'[^A-Za-z0-9_.-]', '-', s['stage'])}.png"
        fig.savefig(path, dpi=110)
        paths.append(path)
    return paths


def _funnel(story: RunStory) -> list[str]:
    if not story.funnel:
        return []
    rows = [f"| {step} | {n:,} | {note} |" for step, n, note in story.funnel]
    return ["## Data funnel", "", "| step | rows | dropped |", "| --- | ---: | --- |", *rows, ""]


def _heldout(h: dict | None) -> list[str]:
    if not h:
        return []
    if h["since"] is None:
        line = (f"{h['pairs']:,} test pairs, recorded for the first time under this data root: later runs keep them "
                "and add the new pairs whose content hash falls below theirs, so that the test set grows with the "
                "corpus.")
    else:
        line = (f"{h['pairs']:,} test pairs, {h['previous']:,} at the data root's last run ({h['since']}): "
                f"{h['added']:,} added (new pairs below the test set's content-hash threshold), {h['gone']:,} gone "
                "(their citation deleted or revised).")
    return ["## Test pairs", "", line, ""]


def _stage1(v: dict | None) -> list[str]:
    if not v:
        return []
    drift = v.get("drift") or {}
    examples = ", ".join(f"`{e['token']}`" for e in v.get("examples", [])[:15])
    return ["## Stage 1: domain vocabulary", "",
            f"{v['tokens_added']:,} tokens added of {v['candidates']:,} candidates (used at least {v['min_count']} "
            f"times); held-out fertility {v['fertility_before']:.3f} → {v['fertility_after']:.3f} pieces per word"
            + (f"; drift of stage 1 (mean cosine to the base embedding): {drift['mean_cos']:.4f}, 5th percentile "
               f"{drift['p5_cos']:.4f}" if drift else "") + f". Examples: {examples}.", "",
            *_glossary_stage1(v.get("glossary"))]


def _glossary_stage1(g: dict | None) -> list[str]:
    if not g:
        return []
    rejected = Counter(r["reason"] for r in g["rejected"])
    defined = g.get("defined") or {}
    rows = (f" Their rows were learnt from their definitions: {defined['steps']} steps on {defined['windows']:,} "
            f"sentences read beside the definitions (loss {defined['loss_start']:.4f} → {defined['loss_end']:.4f}, "
            f"the mean of the first and the last {defined['loss_span']} steps)." if defined.get("steps") else "")
    return [f"Glossary: {g['candidates']:,} one-word terms the base tokenizer splits; **{len(g['added']):,} added**"
            + (f", rejected: {', '.join(f'{n} {r}' for r, n in rejected.most_common())}" if rejected else "")
            + f".{rows}", ""]


def _glossary_terms(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    def rank(value: float | None) -> str:
        return "–" if value is None else f"{value:g}"
    lines = ["## Glossary terms", "", "What the glossary's stages taught the terms stage 1 added (the most used): "
             "the MLM rank the model gives the term where the corpus uses it (median over up to three sentences; "
             "1 = its top prediction) before the dictionary stage and in the adapted model, and the term's nearest "
             "neighbours in the adapted model's embeddings.", "",
             "| term | base pieces | MLM rank before → after | nearest neighbours |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['term']} | {' '.join(r['base_pieces'] or [])} | {rank(r['rank_before'])} → "
              f"{rank(r['rank_after'])} | {', '.join(r['neighbours'])} |" for r in rows]
    return [*lines, ""]


def _decision(d: dict | None) -> list[str]:
    if not d:
        return []
    where = f"published as `{d['published_path']}`" if d["published"] else \
        f"the previous model stays published (`{d['previous'] or 'none yet'}`)"
    recipe = [f"**Recipe:** {d['recipe']['message']}; the gate judged it.", ""] if d.get("recipe") else []
    return [*recipe, f"**Publish gate:** {d['message']} — {where}.", ""]


def render(story: RunStory, out_dir: Path) -> dict[str, Path]:
    """Write ``report.md``, ``report.html`` and the charts to ``out_dir``; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    bars = bar_chart(story.scores, out_dir / "scores.png")
    box = box_plot(story.scores, out_dir / "ndcg_boxplot.png")
    curves = training_curves(story.stages, out_dir)
    differences = story.differences
    images = [p for p in (bars, box, *curves) if p is not None]
    lines = ["# MOSAIC run report", "", *([f"**This run:** {story.tick['words']}.", ""] if story.tick else []),
             *(f"- {h}" for h in headline(story)), "", *_decision(story.decision),
             "## Evaluation (main score × 100; Δ against the base model)", "", delta_table(story), "",
             *([differences_table(differences), ""] if differences else []),
             *([differences_table(story.control_differences), ""] if story.control_differences else []),
             *_funnel(story), *_heldout(story.heldout), *_stage1(story.vocab), *_glossary_terms(story.glossary),
             "## Charts", "",
             *(f"![{p.stem}]({p.name})" for p in images), "",
             "## Run metadata", "", *(f"- **{k}**: `{v}`" for k, v in story.metadata.items()), ""]
    md = "\n".join(lines)
    (out_dir / "report.md").write_text(md)
    (out_dir / "report.html").write_text(_html(md, out_dir))
    (out_dir / "results.json").write_text(json.dumps(
        {"metadata": story.metadata, "tick": story.tick, "decision": story.decision, "heldout": story.heldout,
         "differences": differences,
         "control_differences": story.control_differences,
         "scores": {m: [s.__dict__ for s in ss] for m, ss in story.scores.items()}}, indent=1))
    return {"markdown": out_dir / "report.md", "html": out_dir / "report.html"}


def _html(md: str, out_dir: Path) -> str:
    """The Markdown as one self-contained page: images inlined as data URIs."""
    def inline(match: re.Match) -> str:
        data = base64.b64encode((out_dir / match.group(2)).read_bytes()).decode()
        return f"![{match.group(1)}](data:image/png;base64,{data})"

    body = markdown.markdown(re.sub(r"!\[([^\]]*)\]\(([^)/:]+\.png)\)", inline, md), extensions=["tables"])
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>MOSAIC run report</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;line-height:1.45}}
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}}
th:first-child,td:first-child{{text-align:left}}img{{max-width:100%;margin:1em 0;display:block}}
code{{font-size:90%}}</style></head><body>{body}</body></html>"""
