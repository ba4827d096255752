"""The publish gate: a rebuilt model replaces the published one only if it is not worse, on any
gate task, than the base model it started from or the model published now.

Quality checks are data (:class:`CheckResult`): ``ERROR`` fails the task that runs them,
``WARN`` is recorded (in the run's artifacts and report) and the run goes on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

Severity = Literal["ERROR", "WARN", "INFO"]


@dataclass
class CheckResult:
    name: str
    passed: bool
    severity: Severity
    message: str
    metadata: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def publish_gate(candidate: str, scores: dict[str, dict[str, float]], references: list[str],
                 tasks: list[str], tolerance: float = 0.0) -> CheckResult:
    """Is ``candidate`` at least as good as every model in ``references`` on every gate task?

    ``scores``: model → task → main score (0–1). ``tolerance``: how far (in the same units) the
    candidate may fall below a reference before it fails. A reference or task without a score is
    reported, not silently passed over: a gate task the candidate lacks fails the check."""
    shortfalls, compared = [], []
    for task in tasks:
        mine = scores.get(candidate, {}).get(task)
        if mine is None:
            shortfalls.append(f"{candidate} has no score on {task}")
            continue
        for ref in references:
            theirs = scores.get(ref, {}).get(task)
            if theirs is None:
                continue
            compared.append({"task": task, "reference": ref, "candidate": mine, "score": theirs,
                             "delta": mine - theirs})
            if mine < theirs - tolerance:
                shortfalls.append(f"{candidate} {100 * mine:.2f} < {ref} {100 * theirs:.2f} on {task}")
    passed = not shortfalls
    message = (f"published: {candidate} is not worse than {', '.join(references)} on {', '.join(tasks)}"
               + (f" (tolerance {100 * tolerance:.2f} points)" if tolerance else "")
               if passed else "not published: " + "; ".join(shortfalls))
    return CheckResult("publish-gate", passed, "INFO" if passed else "WARN", message,
                       {"candidate": candidate, "references": references, "tasks": tasks, "tolerance": tolerance,
                        "comparisons": compared})


@dataclass
class RecipeChoice:
    """Which model a run hands to the gate: the adapted model or the plain fine-tuning control."""

    model: str
    recipe: Literal["adapted", "control"]
    difference: float | None
    """Mean per-query NDCG@10 of the adapted model minus the control's, on the validation pairs."""
    low: float | None
    high: float | None
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


def choose_recipe(adapted: str, control: str, difference: dict | None) -> RecipeChoice:
    """The adapted model when it is ahead of the control beyond noise on the validation pairs (the
    95 % paired interval of ``difference``, :func:`~mosaic_core.evaluate.report.paired_differences`'s
    record of adapted against control, lies above 0); otherwise the control: a tie goes to the
    simpler recipe, and a missing comparison too."""
    if difference is None:
        return RecipeChoice(control, "control", None, None, None,
                            f"the control: {adapted} has no validation score to compare with it (the simpler recipe "
                            "wins; train.validation_pairs > 0 lets the adapted model compete)")
    d, lo, hi = (100 * difference[k] for k in ("mean", "low", "high"))
    numbers = (f"{d:+.2f} NDCG@10 points [95 % interval {lo:+.2f}, {hi:+.2f}] on {difference['queries']} "
               "validation queries")
    if difference["low"] > 0:
        return RecipeChoice(adapted, "adapted", difference["mean"], difference["low"], difference["high"],
                            f"the adapted model: ahead of the control by {numbers}")
    verdict = "behind" if difference["high"] < 0 else "not ahead beyond noise"
    return RecipeChoice(control, "control", difference["mean"], difference["low"], difference["high"],
                        f"the control (plain fine-tuning): the adapted model is {verdict}, {numbers}")
