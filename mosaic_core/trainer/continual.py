"""Update ticks: what a rerun that finds new pairs trains, and when it rebuilds everything instead.

A data root's runs form a line of *ticks*. A **full** tick is the pipeline as it always ran: stage
1 and every training stage over all the training pairs, the control from the base. An **update**
tick starts from the live models the last tick left (the adapted model and the control): stage 1
appends the tokens the new pairs earn to the live tokenizer (every existing token keeps its id and
row), then each retrieval stage trains the live adapted model, and the control the live control,
on the new pairs plus a seeded replay of earlier training pairs, for steps that follow the number
of those pairs (:func:`tick_training`). The publish gate judges the result against the published
model and the base as on any run.

:func:`tick_kind` decides which tick a run is, and says why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from mosaic_core.config import TrainConfig, UpdateConfig
from mosaic_core.vocab.selection import Segmenter, word_counts
from mosaic_core.vocab.tokenizers import tokenizer_state

UPDATE, FULL, NONE = "update", "full", "none"


@dataclass(frozen=True)
class TickKind:
    """Which tick a run is (:data:`FULL`, :data:`UPDATE`, or :data:`NONE`: nothing new since an
    update tick, the live models stand) and why, in words for the report and the history;
    ``rerun``: a full rebuild that is the last one again, every step from cache (not a new tick)."""

    kind: str
    reason: str
    rerun: bool = False


def tick_kind(previous: dict | None, model_hash: str, new: int, trainable: int, updates_in_a_row: int,
              cfg: UpdateConfig, full_asked: bool = False, split_drift: float | None = None,
              sparse: bool = False, gone: int = 0) -> TickKind:
    """The kind of this tick. ``previous``: the last tick's record (None before the first run; its
    ``score_drift``: :func:`score_drift` as it measured it); ``model_hash``: this run's
    :meth:`PipelineConfig.model_hash`; ``new``: training pairs the live models never trained on, of
    ``trainable``; ``updates_in_a_row``: update ticks since the last full one; ``split_drift``:
    :func:`split_share` of the new pairs minus the earlier pairs' (None: not measured); ``sparse``:
    a SPLADE run (update ticks are dense only); ``gone``: pairs the live models trained on that
    the corpus no longer has (deleted or revised citations)."""
    if full_asked:
        return TickKind(FULL, "a full rebuild was asked for")
    if previous is None:
        return TickKind(FULL, "the data root's first run")
    if not cfg.enabled:
        return TickKind(FULL, "update ticks are off (update.enabled: false)")
    if sparse:
        return TickKind(FULL, "update ticks train dense models only (model_kind: sparse)")
    if previous.get("model_hash") != model_hash:
        return TickKind(FULL, "the configuration (or the base model) changed since the live models were built")
    if not previous.get("models_present", True):
        return TickKind(FULL, "the live models are gone from the data root")
    if (drift := previous.get("score_drift")) and drift["low"] > 0 and drift["drop"] > cfg.score_drift:
        return TickKind(FULL, f"tick {previous['tick']}'s published model scored the {drift['new']} held-out pairs "
                              f"added since the last full rebuild {100 * drift['drop']:.1f} NDCG@10 points below the "
                              f"earlier ones (95 % interval {100 * drift['low']:+.1f} to {100 * drift['high']:+.1f}; "
                              f"update.score_drift: {100 * cfg.score_drift:.1f})")
    if new == 0:
        if previous["kind"] != FULL:
            return TickKind(NONE, f"no new pairs since tick {previous['tick']}: the live models stand")
        if gone:
            return TickKind(FULL, f"no new pairs, and {gone:,} that the live models trained on are gone")
        return TickKind(FULL, "no new pairs since the last full rebuild: every step from cache", rerun=True)
    share = new / max(trainable, 1)
    if share > cfg.max_new_share:
        return TickKind(FULL, f"the {new:,} new pairs are {share:.0%} of the training pairs, more than "
                              f"update.max_new_share ({cfg.max_new_share:.0%}): a new baseline")
    if updates_in_a_row >= cfg.full_every:
        return TickKind(FULL, f"{updates_in_a_row} update ticks in a row (update.full_every: {cfg.full_every})")
    if split_drift is not None and split_drift > cfg.split_drift:
        return TickKind(FULL, f"the new pairs' words split into three or more pieces {split_drift:+.1%} more often "
                              f"than the earlier pairs' (update.split_drift: {cfg.split_drift:.1%})")
    return TickKind(UPDATE, f"{new:,} new pairs ({share:.1%} of the training pairs)")


def split_share(words: Iterable[tuple[str, int]], pieces_of) -> float:
    """The share of word occurrences that ``pieces_of`` (words → their pieces, as
    :class:`~mosaic_core.vocab.selection.Segmenter`) splits into three or more pieces; ``words``:
    (word, count)."""
    words = list(words)
    total = sum(n for _, n in words)
    if not total:
        return 0.0
    split = pieces_of([w for w, _ in words])
    return sum(n for (_, n), p in zip(words, split, strict=True) if len(p) >= 3) / total


def replay_sample(earlier: np.ndarray, new: int, ratio: float, seed: int, tick: int, batch: int = 1) -> np.ndarray:
    """``round(ratio × new)`` of the ``earlier`` pair hashes (distinct), or as many as fill one
    ``batch`` with the ``new`` pairs when that is more (a stage refuses fewer pairs than a batch),
    all of them when fewer; drawn without replacement by a generator seeded with (``seed``,
    ``tick``), in hash order."""
    earlier = np.unique(earlier)
    n = min(len(earlier), max(round(ratio * new), batch - new))
    rng = np.random.default_rng([seed, tick])
    return np.sort(rng.choice(earlier, size=n, replace=False)) if n else earlier[:0]


def split_drift(tokenizer, new: Iterable[str], earlier: list[str]) -> float | None:
    """How much more often ``tokenizer`` (the live model's) splits the words of the ``new`` texts
    into three or more pieces than the words of the ``earlier`` ones (:func:`split_share`); None
    without earlier texts to compare."""
    if not earlier:
        return None
    pieces = Segmenter(tokenizer_state(tokenizer))
    return (split_share(word_counts(tokenizer, new).items(), pieces)
            - split_share(word_counts(tokenizer, earlier).items(), pieces))


MIN_DRIFT_PAIRS = 10
"""Held-out pairs added since the last full rebuild that :func:`score_drift` needs to measure."""


def score_drift(scores: dict[int, float], earlier: np.ndarray, seed: int = 0, draws: int = 2000) -> dict | None:
    """How much lower a model scores the held-out pairs the last full rebuild did not hold out (new
    since: a domain that moved) than the ones it did (``earlier``: their content hashes);
    ``scores``: content hash → the model's NDCG@10 on that held-out pair. Returns ``drop`` (the
    earlier pairs' mean minus the new pairs'), ``low``, ``high`` (its 95 % bootstrap interval, the
    two sets resampled apart), ``new``, ``earlier`` (how many); None with fewer than
    :data:`MIN_DRIFT_PAIRS` new pairs or no earlier one."""
    known = np.isin(np.fromiter(scores, dtype=np.uint64, count=len(scores)), earlier)
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    old, new = values[known], values[~known]
    if len(new) < MIN_DRIFT_PAIRS or not len(old):
        return None
    rng = np.random.default_rng(seed)
    chunk = max(1, 2**22 // max(len(old), len(new)))  # a few million draws in memory at a time
    drops = np.concatenate([rng.choice(old, (n, len(old))).mean(1) - rng.choice(new, (n, len(new))).mean(1)
                            for n in [chunk] * (draws // chunk) + ([draws % chunk] if draws % chunk else [])])
    low, high = np.quantile(drops, [0.025, 0.975])
    return {"drop": float(old.mean() - new.mean()), "low": float(low), "high": float(high), "new": int(len(new)),
            "earlier": int(len(old))}


def stage_passes(steps: int, batch: int, pairs: int) -> float | None:
    """The passes over its ``pairs`` that a stage of ``steps`` steps of ``batch`` pairs made (None
    without pairs)."""
    return steps * batch / pairs if pairs else None


def tick_training(train: TrainConfig, pairs: int, epochs: float | dict[str, float]) -> TrainConfig:
    """``train`` as an update tick trains it on ``pairs`` pairs: its retrieval stages (the MLM
    warm-ups and the dictionary stage were for a fresh head and fresh rows, which the live model
    has), each ``ceil(epochs × pairs / batch_size)`` steps at most its own ``max_steps``
    (``epochs``: the same for every stage, or per stage name, 1.0 for a stage it does not name);
    nothing held out of the tick's pairs (the data root's test and validation pairs never enter
    them) and no validation inside a stage, no merge step, no warm-up added; a stage on pairs of
    its own (seed 004's general stage) is not rerun. The tick's pairs file has ``query`` and
    ``document`` columns."""
    def passes(stage) -> float:
        return epochs.get(stage.name, 1.0) if isinstance(epochs, dict) else epochs

    stages = tuple(s.model_copy(update={
        "max_steps": min(max(1, math.ceil(passes(s) * pairs / (s.batch_size * s.accumulation))),
                         s.max_steps or math.inf),
        "epochs": 1, "eval_every": None, "warmup_ratio": 0.0, "query_column": None, "document_column": None})
        for s in train.stages if s.kind != "mlm" and s.pairs is None)
    if not stages:
        raise ValueError("an update tick trains the retrieval stages on the domain's pairs, and train.stages has "
                         "none (only mlm stages, or stages on pairs of their own)")
    return train.model_copy(update={"stages": stages, "heldout_pairs": 0, "validation_pairs": 0, "merge_weights": (),
                                    "dictionary": None, "mlm_warmup": "off", "query_column": "query",
                                    "document_column": "document"})
