"""Prefect task of the run report: the pipeline's story on one page (:mod:`mosaic_core.evaluate.run_report`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from mosaic_core.config_sources import PubMedSource
from mosaic_core.evaluate.run_report import RunStory, headline, render
from mosaic_core.evaluate.scoring import TaskScore
from storage.manifest import Manifest


def _reasons(counts: Counter) -> str:
    return ", ".join(f"{reason} {n:,}" for reason, n in counts.most_common() if n) or "–"


def funnel(ingested: list[Manifest], filtered: list[Manifest], stage: dict | None, validation: int,
           test: int, words: tuple[str, str, str, str] = PubMedSource.funnel_words,
           definitions: int = 0) -> list[tuple[str, int, str]]:
    """(step, rows after it, what it dropped) from the ingest and filter manifests, the first
    stage's result on the run's pairs and the held-out split's sizes, its first steps in the
    source's ``words`` (``Source.funnel_words``); ``definitions``: a glossary's definition pairs
    among its pairs."""
    read, parts, after_rules, latest = words
    rows = []
    if ingested:
        dropped = sum((Counter(m.dropped) for m in ingested), Counter())
        plural = "s" if len(ingested) != 1 else ""
        rows.append((read, sum(m.records_in for m in ingested), f"{len(ingested)} {parts}{plural}"))
        rows.append((after_rules, sum(m.kept for m in ingested), _reasons(dropped)))
    if filtered:
        dropped = sum((Counter(m.dropped) for m in filtered), Counter())
        rows.append((latest, sum(m.rows_out for m in filtered), ""))
        rows.append(("kept by the filter", sum(m.kept for m in filtered), _reasons(dropped)))
    if stage:
        rows.append(("training pairs", stage["pairs"], f"validation {validation:,}, test {test:,} held out"
                     + (f"; {definitions:,} definition pairs from the glossary added" if definitions else "")))
    return rows


@task(name="run-report", cache_policy=NO_CACHE)
def run_report(story: RunStory, out_dir: str) -> dict[str, str]:
    """Write the run report to ``out_dir`` and show its headline in the Prefect UI."""
    paths = render(story, Path(out_dir))
    create_markdown_artifact(key="run-report", markdown="\n".join(f"- {h}" for h in headline(story))
                             + (f"\n\n**{story.decision['message']}**" if story.decision else ""),
                             description=f"MOSAIC run report: {paths['html']}")
    return {k: str(v) for k, v in paths.items()}


def story(candidate: str, scores: dict[str, list[dict]], **rest) -> RunStory:
    """A :class:`RunStory` from the evaluation flow's scores (dicts) and the other parts."""
    return RunStory(candidate, "base", {m: [TaskScore(**s) for s in ss] for m, ss in scores.items()}, **rest)
