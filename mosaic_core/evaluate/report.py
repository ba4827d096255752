"""The comparison report: tasks × models grid (Markdown + self-contained HTML), a per-task bar
chart and a per-query NDCG@10 box plot (PNG), and the run's metadata."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure  # no pyplot: no global backend or figure state
from scipy.stats import bootstrap

from mosaic_core.evaluate.scoring import TaskScore


def grid(scores: dict[str, list[TaskScore]]) -> tuple[list[str], list[str], dict[tuple[str, str], float]]:
    """(models, tasks, {(model, task): value})."""
    models = list(scores)
    tasks = list(dict.fromkeys(s.task for ss in scores.values() for s in ss))
    values = {(m, s.task): s.value for m, ss in scores.items() for s in ss}
    return models, tasks, values


def _best(models: list[str], task: str, values: dict) -> float | None:
    present = [values[(m, task)] for m in models if (m, task) in values]
    return max(present) if present else None


def _average(model: str, tasks: list[str], values: dict) -> float | None:
    got = [values[(model, t)] for t in tasks if (model, t) in values]
    return sum(got) / len(got) if len(got) == len(tasks) else None


def markdown_table(scores: dict[str, list[TaskScore]], metrics: dict[str, str]) -> str:
    """Table-1 style: one row per model, one column per task (×100), best per column in bold."""
    models, tasks, values = grid(scores)
    head = "| model | " + " | ".join(f"{t} ({metrics.get(t, '')})" for t in tasks) + " | average |"
    lines = [head, "|" + " --- |" * (len(tasks) + 2)]
    averages = {m: _average(m, tasks, values) for m in models}
    best_avg = max((a for a in averages.values() if a is not None), default=None)
    for m in models:
        cells = []
        for t in [*tasks, None]:
            v = averages[m] if t is None else values.get((m, t))
            best = best_avg if t is None else _best(models, t, values)
            text = "–" if v is None else f"{100 * v:.2f}"
            cells.append(f"**{text}**" if v is not None and v == best and len(models) > 1 else text)
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_differences(scores: dict[str, list[TaskScore]], reference: str | None = None, resamples: int = 2000,
                       seed: int = 0) -> list[dict]:
    """Each model against ``reference`` (default: the first), per retrieval task scored per
    query: the mean per-query difference of NDCG@10 and its 95 % paired bootstrap interval (the
    same queries resampled for both models; seeded, so a report is reproducible), and how many
    queries changed at all. An interval that holds 0 is a difference these queries cannot tell
    from none."""
    reference = next(iter(scores), None) if reference is None else reference
    if reference not in scores:
        return []
    per_task = {s.task: s.per_query for s in scores[reference] if s.per_query}
    out = []
    for model in (m for m in scores if m != reference):
        for s in scores[model]:
            ref = per_task.get(s.task)
            if not s.per_query or not ref:
                continue
            queries = sorted(set(ref) & set(s.per_query))
            diff = np.array([s.per_query[q] - ref[q] for q in queries])
            if len(diff) < 2 or not diff.any():
                low = high = float(diff.mean()) if len(diff) else 0.0
            else:
                ci = bootstrap((diff,), np.mean, n_resamples=resamples, method="percentile",
                               rng=np.random.default_rng(seed)).confidence_interval
                low, high = float(ci.low), float(ci.high)
            out.append({"model": model, "reference": reference, "task": s.task, "queries": len(queries),
                        "changed": int(np.count_nonzero(diff)), "mean": float(diff.mean()) if len(diff) else 0.0,
                        "low": low, "high": high})
    return out


def differences_table(differences: list[dict]) -> str:
    """Markdown of :func:`paired_differences` (×100)."""
    if not differences:
        return ""
    lines = [f"Against {differences[0]['reference']}, per query (NDCG@10 × 100; 95 % paired bootstrap "
             "interval):", "",
             "| model | task | difference | 95 % interval | queries changed |",
             "| --- | --- | ---: | ---: | ---: |"]
    lines += [f"| {d['model']} | {d['task']} | {100 * d['mean']:+.2f} | "
              f"[{100 * d['low']:+.2f}, {100 * d['high']:+.2f}] | {d['changed']} of {d['queries']} |"
              for d in differences]
    return "\n".join(lines)


def dims_table(scores: dict[str, list[TaskScore]]) -> str:
    """Markdown of the scores of embeddings cut to fewer dimensions (``mosaic eval --dims``): one
    row per model and task, one column per dimension (×100); empty when nothing was cut."""
    cut = [(m, s) for m, ss in scores.items() for s in ss if s.dim is not None]
    if not cut:
        return ""
    dims = sorted({s.dim for _, s in cut}, reverse=True)
    rows: dict[tuple[str, str], dict[int, float]] = {}
    for m, s in cut:
        rows.setdefault((m, s.task.removesuffix(f"@{s.dim}")), {})[s.dim] = s.value
    lines = ["Embeddings cut to their first d dimensions and renormalised (main score × 100):", "",
             "| model | task | " + " | ".join(f"{d} d" for d in dims) + " |", "| --- | --- |" + " ---: |" * len(dims)]
    lines += [f"| {m} | {t} | " + " | ".join(f"{100 * v[d]:.2f}" if d in v else "–" for d in dims) + " |"
              for (m, t), v in rows.items()]
    return "\n".join(lines)


def bar_chart(scores: dict[str, list[TaskScore]], path: Path) -> Path:
    models, tasks, values = grid(scores)
    fig = Figure(figsize=(max(6, 1.6 * len(tasks) * max(1, len(models)) / 2), 4))
    ax = fig.subplots()
    width = 0.8 / max(1, len(models))
    for i, m in enumerate(models):
        xs = [j + i * width for j in range(len(tasks))]
        ys = [100 * values.get((m, t), 0.0) for t in tasks]
        bars = ax.bar(xs, ys, width, label=m)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks([j + width * (len(models) - 1) / 2 for j in range(len(tasks))], tasks, rotation=15)
    ax.set_ylabel("main score × 100")
    ax.set_title("Score per task")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def box_plot(scores: dict[str, list[TaskScore]], path: Path) -> Path | None:
    """Per-query NDCG@10 distributions, one panel per retrieval task (Figure-2 style)."""
    tasks = list(dict.fromkeys(s.task for ss in scores.values() for s in ss if s.per_query))
    if not tasks:
        return None
    fig = Figure(figsize=(max(5, 3 * len(tasks) + 1), 4))
    axes = fig.subplots(1, len(tasks), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        data, labels = [], []
        for model, ss in scores.items():
            for s in ss:
                if s.task == task and s.per_query:
                    data.append(list(s.per_query.values()))
                    labels.append(model)
        ax.boxplot(data, showmeans=True)
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=20, fontsize=8)
        ax.set_title(f"{task}: per-query NDCG@10", fontsize=9)
        ax.set_ylim(-0.02, 1.02)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def write_report(scores: dict[str, list[TaskScore]], out_dir: Path, metadata: dict,
                 notes: Sequence[str] = ()) -> dict[str, Path]:
    """``report.md``, ``report.html`` (images embedded), ``scores.png``, ``ndcg_boxplot.png``
    and ``results.json`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = {s.task: s.metric for ss in scores.values() for s in ss}
    table = markdown_table(scores, metrics)
    bars = bar_chart(scores, out_dir / "scores.png")
    box = box_plot(scores, out_dir / "ndcg_boxplot.png")
    differences = paired_differences(scores)
    paired = differences_table(differences)
    cut = dims_table(scores)
    meta_lines = [f"- **{k}**: `{v}`" for k, v in metadata.items()]
    md = "\n".join(["# MOSAIC evaluation report", "", table, "", *(f"> {n}" for n in notes), "",
                    *([paired, ""] if paired else []), *([cut, ""] if cut else []),
                    "![scores](scores.png)", "", *([f"![per-query NDCG@10]({box.name})", ""] if box else []),
                    "## Run metadata", *meta_lines, ""])
    (out_dir / "report.md").write_text(md)
    (out_dir / "report.html").write_text(_html(table, [bars, box], metadata, notes, paired, cut))
    (out_dir / "results.json").write_text(json.dumps(
        {"metadata": metadata, "scores": {m: [s.__dict__ for s in ss] for m, ss in scores.items()},
         "differences": differences}, indent=1))
    return {"markdown": out_dir / "report.md", "html": out_dir / "report.html", "bars": bars,
            **({"boxplot": box} if box else {})}


def _html_table(table_md: str) -> str:
    rows = [r.strip("|").split("|") for r in table_md.splitlines()]
    head, body = rows[0], rows[2:]

    def cell(tag: str, text: str) -> str:
        text = text.strip()
        bold = text.startswith("**")
        inner = html.escape(text.strip("*"))
        return f"<{tag}{' class=best' if bold else ''}>{inner}</{tag}>"

    return ("<table><tr>" + "".join(cell("th", c) for c in head) + "</tr>"
            + "".join("<tr>" + "".join(cell("td", c) for c in r) + "</tr>" for r in body) + "</table>")


def _html(table_md: str, images: list[Path | None], metadata: dict, notes: Sequence[str], paired: str = "",
          dims: str = "") -> str:
    table = _html_table(table_md)
    for section in (paired, dims):
        if section:
            caption, _, rows = section.partition("\n\n")
            table += f"<p>{html.escape(caption)}</p>{_html_table(rows)}"
    imgs = "".join(f'<img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
                   for p in images if p is not None)
    meta = "".join(f"<tr><th>{html.escape(str(k))}</th><td><code>{html.escape(str(v))}</code></td></tr>"
                   for k, v in metadata.items())
    note = "".join(f"<p class=note>{html.escape(n)}</p>" for n in notes)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>MOSAIC evaluation report</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}
table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}}th:first-child,td:first-child{{text-align:left}}
.best{{font-weight:bold;background:#e6f4ea}}img{{max-width:100%;margin:1em 0;display:block}}.note{{color:#555}}
code{{font-size:90%}}</style></head><body><h1>MOSAIC evaluation report</h1>{table}{note}{imgs}
<h2>Run metadata</h2><table>{meta}</table></body></html>"""
