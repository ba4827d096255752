"""Prefect tasks of the ticks (:mod:`mosaic_core.trainer.continual`): which tick a run is, the update
tick's pairs, and the tick's record."""

from __future__ import annotations

import logging
import time

import numpy as np
from prefect import task
from prefect.cache_policies import NO_CACHE
from transformers import AutoTokenizer

from mosaic_core.config import PipelineConfig
from mosaic_core.modeling.modeldir import read_stage_record, read_vocab_report
from mosaic_core.trainer.continual import (
    FULL,
    NONE,
    UPDATE,
    replay_sample,
    score_drift,
    split_drift,
    stage_passes,
    tick_kind,
)
from mosaic_core.trainer.heldout import content_hashes, pair_hashes, split_by_hash
from storage.examples import examples_file, map_examples
from storage.layout import DataLayout
from storage.pairs_io import pair_batches, write_jsonl
from storage.ticks import append_tick, last_tick, read_ticks, trained_pairs
from tasks.heldout import recorded_split
from tasks.publish import scores_by_model

log = logging.getLogger(__name__)


def split_hashes(data_root: str, cfg: PipelineConfig) -> tuple[np.ndarray, np.ndarray]:
    """(training, test): ``uint64`` content hashes of ``data_root``'s training pairs (every pair
    but the test and validation pairs, as training splits them; none without a query) and of its
    test pairs, in the order of the held-out task's queries."""
    hashes = pair_hashes(pair_batches(data_root))
    n_test, n_validation = cfg.train.heldout_pairs, cfg.train.validation_pairs
    split = split_by_hash(hashes, n_test, n_validation, recorded_split(data_root, n_test, n_validation))
    train = hashes[split.train]
    return train[train != 0], hashes[split.test]


def training_hashes(data_root: str, cfg: PipelineConfig) -> np.ndarray:
    """``uint64 [n]``: the content hashes of ``data_root``'s training pairs (:func:`split_hashes`)."""
    return split_hashes(data_root, cfg)[0]


def _rows(data_root: str, wanted: np.ndarray) -> dict[int, dict]:
    """Content hash → pair (``query``, ``document`` and its ``negatives``: the texts of the hard
    negatives the filter found for it, which the full rebuild's stages and control train with) of
    the pairs of ``data_root`` whose hash is in ``wanted``, in the root's order, once each. Read
    from the root's examples file (``models/examples``, as training reads the root)."""
    table = map_examples(examples_file(data_root, "query", "document", DataLayout(data_root).models_dir / "examples"))
    documents, rows = table.column("document"), {}
    for start in range(0, table.num_rows, 8192):
        batch = table.slice(start, 8192)
        hashes = content_hashes(batch.column("query").to_pylist(), batch.column("document").to_pylist())
        for i in np.flatnonzero(np.isin(hashes, wanted)):
            rows.setdefault(int(hashes[i]), {
                "query": batch.column("query")[i].as_py(), "document": batch.column("document")[i].as_py(),
                "negatives": [documents[j].as_py() for j in batch.column("negatives")[i].as_py() or []]})
    return rows


def _row_budget(data_root: str, batch_size: int) -> dict | None:
    """What the last full rebuild's stage 1 gave each glossary row it learnt from its definition
    (:class:`~mosaic_core.vocab.define.RowBudget`: ``updates``, ``terms``), an update tick's budget
    for the rows it defines; None: it learnt none. For a record written before stage 1 counted the
    updates, an estimate: each step holding a row with the batch's share of the terms
    (``batch_size``: stage 1's), at most every step."""
    report = read_vocab_report(DataLayout(data_root).models_dir / "stage1") or {}
    defined = (report.get("glossary") or {}).get("defined") or {}
    if not defined.get("tokens"):
        return None
    expected = defined["steps"] * min(1.0, batch_size / defined["tokens"])
    return {"updates": defined.get("row_updates", expected), "terms": defined["tokens"]}


def full_passes(data_root: str) -> dict[str, float]:
    """Stage name → the passes over its pairs the last full rebuild's stage of that name made
    (:func:`~mosaic_core.trainer.continual.stage_passes`, from the records of its stages: its
    adapted model's, then each input model's in turn): an update tick's budget, which trains every
    pair at the full rebuild's rate. Empty without a full rebuild on record."""
    full = next((t for t in reversed(read_ticks(data_root)) if t["kind"] == FULL), None)
    out, folder = {}, full and full["models"].get("adapted")
    while folder and (record := read_stage_record(folder)) is not None:
        result, config = record.get("result") or {}, record["config"]
        if result.get("steps") and result.get("pairs"):
            batch = config["batch_size"] * config.get("accumulation", 1)
            out.setdefault(config["name"], stage_passes(result["steps"], batch, result["pairs"]))
        folder = record.get("input_model")
    return out


@task(name="prepare-tick", cache_policy=NO_CACHE)
def prepare_tick(data_root: str, cfg: PipelineConfig, full: bool = False) -> dict:
    """Which tick this run is (:func:`tick_kind`) and, for an update tick, its pairs: the training
    pairs the live models never trained on and a seeded replay of the ones they did, written to
    ``models/ticks/<n>/pairs.jsonl``. Returns the tick's plan: ``tick`` (its number), ``kind``,
    ``reason``, ``new``, ``replay``, ``trainable``, ``split_drift``, ``live`` (the live models:
    ``adapted``, ``control``), ``pairs_path``, ``row_budget`` (the budget of the glossary
    rows its stage 1 learns: :func:`_row_budget`), ``passes`` (its stages' passes over its pairs
    when ``update.epochs`` leaves them to the last full rebuild: :func:`full_passes`), ``record``
    (whether the run adds a tick record: not for a rerun that takes every step of the last full
    rebuild from cache)."""
    previous = last_tick(data_root)
    ticks = read_ticks(data_root)
    in_a_row = next((i for i, t in enumerate(reversed(ticks)) if t["kind"] == FULL), len(ticks))
    n = len(ticks) + 1
    plan = {"tick": n, "new": 0, "replay": 0, "trainable": 0, "split_drift": None, "pairs_path": None,
            "live": previous["models"] if previous else {}, "record": True}
    if full or previous is None:
        kind = tick_kind(previous, cfg.model_hash(), 0, 0, in_a_row, cfg.update, full_asked=full)
        return {**plan, "kind": kind.kind, "reason": kind.reason}
    train, earlier = np.unique(training_hashes(data_root, cfg)), trained_pairs(data_root)
    new = train[~np.isin(train, earlier)]
    plan.update(new=len(new), trainable=len(train))
    rules = {"sparse": cfg.model_kind == "sparse", "gone": int((~np.isin(earlier, train)).sum())}
    kind = tick_kind(previous, cfg.model_hash(), len(new), len(train), in_a_row, cfg.update, **rules)
    if kind.kind == UPDATE:
        replay = replay_sample(train[np.isin(train, earlier)], len(new), cfg.update.replay, cfg.update.seed, n,
                               batch=cfg.largest_batch)
        rows = _rows(data_root, np.concatenate([new, replay]))
        fresh = {int(h) for h in new}
        texts = {w: [t for h, r in rows.items() if (h in fresh) == (w == "new") for t in (r["query"], r["document"])]
                 for w in ("new", "earlier")}
        drift = split_drift(AutoTokenizer.from_pretrained(previous["models"]["adapted"]), texts["new"],
                            texts["earlier"])
        kind = tick_kind(previous, cfg.model_hash(), len(new), len(train), in_a_row, cfg.update, split_drift=drift,
                         **rules)
        plan["split_drift"] = drift
        if kind.kind == UPDATE:
            path = DataLayout(data_root).tick_dir(n) / "pairs.jsonl"
            write_jsonl(path, list(rows.values()))
            plan.update(replay=len(rows) - len(new), pairs_path=str(path),
                        row_budget=_row_budget(data_root, cfg.vocab.distill.batch_size),
                        passes=cfg.update.epochs if cfg.update.epochs is not None else full_passes(data_root))
    plan["record"] = kind.kind != NONE and not kind.rerun
    log.info("tick %d: %s (%s)", n, kind.kind, kind.reason)
    return {**plan, "kind": kind.kind, "reason": kind.reason}


@task(name="record-tick", cache_policy=NO_CACHE)
def record_tick(data_root: str, cfg: PipelineConfig, plan: dict, models: dict[str, str], summary: dict) -> dict:
    """Append this tick's record (its plan, its models, ``summary``: what it trained, its cost,
    scores and decision) and the pairs its models have now trained on: a full tick's, every
    training pair; an update tick's, the live models' and the tick's new pairs."""
    held = {}
    if plan["kind"] == FULL:
        trained, test = split_hashes(data_root, cfg)
        held = {"test_pairs": [format(int(h), "016x") for h in test]}  # what a later score drift compares with
    else:
        trained = np.union1d(trained_pairs(data_root), pair_hashes(pair_batches(plan["pairs_path"])))
    record = {"tick": plan["tick"], "kind": plan["kind"], "reason": plan["reason"], "model_hash": cfg.model_hash(),
              "new_pairs": plan["new"], "replay_pairs": plan["replay"], "split_drift": plan["split_drift"],
              "models": models, **summary, **held}
    append_tick(data_root, record, trained)
    return {**record, "trained_pairs": len(trained)}


@task(name="score-drift", cache_policy=NO_CACHE)
def measure_score_drift(data_root: str, cfg: PipelineConfig, per_query: dict[str, float] | None) -> dict | None:
    """:func:`~mosaic_core.trainer.continual.score_drift` of the model published after a tick, whose NDCG@10 on
    the held-out task is ``per_query`` (query ``q<i>``: the root's ``i``-th test pair), between the
    held-out pairs the last full rebuild held out and those added since; None when it cannot be
    measured (no per-query scores, no full rebuild on record, too few new pairs)."""
    full = next((t for t in reversed(read_ticks(data_root)) if t["kind"] == FULL), None)
    if not per_query or full is None or "test_pairs" not in full:
        return None
    test = split_hashes(data_root, cfg)[1]
    scores = {int(test[int(q[1:])]): v for q, v in per_query.items() if int(q[1:]) < len(test)}
    earlier = np.array([int(h, 16) for h in full["test_pairs"]], dtype=np.uint64)
    return score_drift(scores, earlier, seed=cfg.update.seed)


def tick_summary(started: float, pairs: int, stages: list[dict], vocab: dict, decision: dict, candidate: str,
                 scores: dict[str, list[dict]], run_id: str) -> dict:
    """What a tick's record keeps of its run (``started``: its ``time.monotonic()`` at the start;
    ``pairs``: the pairs its retrieval stages trained on): its cost, what it trained on, the tokens
    it added, the model judged and its scores (main score per task of it, the base and the
    published model), whether it was published."""
    by_model = scores_by_model(scores)
    return {"seconds": round(time.monotonic() - started, 1), "pairs_trained": pairs,
            "tokens_added": vocab["tokens_added"], "steps": sum(s["steps"] for s in stages),
            "published": decision["published"], "candidate": candidate, "run_id": run_id,
            "scores": {m: by_model[m] for m in (candidate, "base", "published") if m in by_model}}


def tick_words(plan: dict) -> str:
    """The tick in a line, for the report and the run's summary."""
    what = {FULL: "full rebuild", UPDATE: "update tick", NONE: "no tick"}[plan["kind"]]
    extra = (f": {plan['new']:,} new pairs + {plan['replay']:,} replayed" if plan["kind"] == UPDATE else "")
    return f"tick {plan['tick']}, {what} ({plan['reason']}){extra}"

