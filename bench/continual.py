"""Continual adaptation: a stream of updates, three ways (issue 66).

    python bench/continual.py [--work /work/runs/continual] [--ticks 10] [--seed 0] [--real]
        [--arms update,full,none] [--full-at 1,5,10] [--report-only]

**The stream.** The demo's (``mosaic_core.data.demo.make_stream``): the demo's baseline (24
invented words), then one PubMed update file per tick, each about 5 % of the baseline's
citations, in which a new invented word appears (``quelvorin`` at tick 1, ``tramixide`` at 2, …).
With ``--real``: the 9,852 real biomedical pairs (title → abstract), split by content hash into a
baseline half and ``--ticks`` equal parts of the other half (5 % each for 10 ticks), an own-pairs
source whose glob gains one file per tick.

**The arms**, each in a data root of its own (``WORK/<stream>/<arm>/root``) with its own source
folder (``WORK/<stream>/<arm>/snapshot``, or ``…/pairs`` with ``--real``: the baseline, then
update ``k`` copied in before tick ``k``) and pipeline YAML (``…/pipeline.yaml``: the demo's
settings with a ``pubmed`` source on that folder; the defaults of ``mosaic run --pairs`` with the
offline MiniLM and SciFact with ``--real``):

- ``update``: ``mosaic run -c CFG -d ROOT`` at every tick (an update tick, which warm-starts from
  the live model on the new pairs, once branch ``tick`` lands; a full rebuild before);
- ``full``: ``mosaic run -c CFG -d ROOT --full`` (rebuild everything) at every tick after 0, or
  at the ticks of ``--full-at`` only (a full rebuild of the demo is ~15 CPU minutes), in a root
  that holds out the very pairs ``update``'s does (its held-out record copied before its first run);
- ``none``: no run: ``update``'s tick-0 model (the baseline's full rebuild, which every arm would
  train alike) scored on every later tick's tasks.

**The scores.** Every arm's published model (``ROOT/models/current``) after each of its ticks,
and ``none``'s tick-0 model at every tick, is scored by ``mosaic eval`` on the same BEIR folders
(``WORK/<stream>/tasks``): the tick's held-out pairs (as the pipeline holds them out, taken from
the ``update`` root, else the ``full`` one, right after the tick; query ids are content hashes, so
that arms pair by query), the tick-0 held-out pairs (forgetting), and the invented-term task
(``--real``: SciFact). The invented-term task is reported over the words introduced so far and
over the new words alone (a query's word is its id's ``{word}-q{k}``; ``introduced.json``).
Each (arm, tick) has a record in RESULTS (``bench/results/continual/<stream>-<arm>-tNN.json``:
per-query NDCG@10, wall and CPU time, the tick's entry of ``ROOT/state/ticks.json``, the
machine), so a rerun skips every recorded point; WORK caches each ``mosaic`` command
(``points/``), so an interrupted run goes on where it stopped. The tables: per tick and arm the
wall time, pairs trained and scores; then each arm against ``full`` and ``none`` at each tick,
with 95 % paired bootstrap intervals over the task's queries.

**What branch ``tick`` provides**: the ``--full`` flag of ``mosaic run``, and
``ROOT/state/ticks.json``, a list of records (the last one the latest tick's) with ``kind``
("full" | "update"), ``reason``, ``new_pairs``, ``pairs_trained``, ``tokens_added``, ``seconds``.
Without the file the tables say "n/a"; without the flag the ``full`` arm stops before it starts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.budget_curve import _mosaic, _once, _write, machine  # noqa: E402
from mosaic_core.evaluate.report import paired_differences  # noqa: E402
from mosaic_core.evaluate.scoring import TaskScore  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "bench" / "results" / "continual"
PAIRS = SHARED / "biomed" / "biomed_title_abstract.jsonl"
SCIFACT = SHARED / "scifact"
BASE = "offline:all-MiniLM-L6-v2"
ARMS = ("update", "full", "none")
"""In the order a tick runs them: the held-out pairs of a tick come from the first that ran it."""
FULL_FLAG = "--full"
TICKS_FILE = Path("state") / "ticks.json"
TASKS = ("heldout", "heldout-t0", "invented-so-far", "new-words", "scifact")
"""The tasks of the tables: the tick's held-out pairs, tick 0's, the invented-term task over the
words introduced so far and over the new words only (the demo), SciFact (``--real``)."""


# -- pure parts ---------------------------------------------------------------------------------

def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def real_split(rows: list[dict], ticks: int, query: str = "title", document: str = "abstract",
               ) -> list[list[dict]]:
    """``rows`` as [baseline, update 1, …, update ``ticks``]: ordered by the content hash of
    (query, document) (then by position, for exact duplicates), the first half is the baseline and
    the rest is cut into ``ticks`` parts whose sizes differ by one at most. Deterministic, disjoint,
    and every row is in one part."""
    order = sorted(range(len(rows)), key=lambda i: (_digest(f"{rows[i][query]}\x1f{rows[i][document]}"), i))
    half = len(order) // 2
    parts, rest = [order[:half]], order[half:]
    size, extra = divmod(len(rest), ticks)
    start = 0
    for k in range(ticks):
        end = start + size + (k < extra)
        parts.append(rest[start:end])
        start = end
    return [[rows[i] for i in part] for part in parts]


def read_rows(path: Path) -> list[dict]:
    """The rows of a JSON-lines file (lines end at ``\n`` only: texts may hold U+2028)."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def query_word(query_id: str) -> str:
    """The word an invented-term query asks about: ``zorvatide-q1`` → ``zorvatide``."""
    return query_id.rsplit("-q", 1)[0]


def words_by(introduced: dict[str, int], tick: int, new_only: bool = False) -> set[str]:
    """The words introduced at ``tick`` or before (``new_only``: after the baseline only)."""
    return {w for w, k in introduced.items() if k <= tick and (k > 0 or not new_only)}


def restrict(score: TaskScore, words: set[str], task: str) -> TaskScore | None:
    """``score`` (the invented-term task, scored per query) over the queries about ``words`` only,
    named ``task``; None when none of its queries is about them."""
    kept = {q: v for q, v in (score.per_query or {}).items() if query_word(q) in words}
    if not kept:
        return None
    return TaskScore(task=task, metric=score.metric, value=sum(kept.values()) / len(kept), n=len(kept),
                     per_query=kept)


def arm_ticks(arm: str, ticks: int, full_at: list[int] | None = None) -> list[int]:
    """The ticks ``arm`` runs ``mosaic run`` at: ``update`` every one (tick 0 is the baseline's full
    rebuild, which the other arms share: the same seed gives the same models), ``full`` every tick
    after 0 or those of ``full_at``, ``none`` never (``update``'s tick-0 model is scored at each tick)."""
    if arm == "none":
        return []
    if arm == "full":
        return sorted({k for k in full_at if 1 <= k <= ticks}) if full_at else list(range(1, ticks + 1))
    return list(range(ticks + 1))


def content_task(heldout: list[tuple[str, str]], distractors: list[str],
                 ) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    """(corpus, queries, qrels) of held-out pairs over their documents and ``distractors``, with
    ids from the texts (``q``/``d`` + hash) so that two roots' tasks pair by query."""
    docs = dict.fromkeys([*(d for _, d in heldout), *distractors])
    corpus = [{"id": f"d{_digest(d)}", "title": "", "text": d} for d in docs]
    queries, qrels = {}, {}
    for q, d in heldout:
        qid = "q" + _digest(f"{q}\x1f{d}")
        queries[qid] = q
        qrels[qid] = {f"d{_digest(d)}": 1}
    return corpus, queries, qrels


def tick_scores(record: dict) -> dict[str, TaskScore]:
    """A record's scores by the tables' tasks (:data:`TASKS`): the invented-term task restricted
    to the record's words and new words; at tick 0 the held-out pairs are tick 0's too."""
    raw = {s["task"]: TaskScore(**s) for s in record["scores"]}
    out = {t: raw[t] for t in ("heldout", "heldout-t0", "scifact") if t in raw}
    if record["tick"] == 0 and "heldout" in raw:
        out["heldout-t0"] = replace(raw["heldout"], task="heldout-t0")
    if "invented-terms" in raw:
        for task, words in (("invented-so-far", record["words"]), ("new-words", record["new_words"])):
            if (score := restrict(raw["invented-terms"], set(words), task)) is not None:
                out[task] = score
    return out


def comparisons(records: dict[tuple[str, int], dict]) -> list[dict]:
    """At each tick, each arm against each later arm of ``full``, ``none`` that has a record then:
    :func:`paired_differences` per task, with the tick."""
    out = []
    for tick in sorted({k for _, k in records}):
        for arm in ARMS:
            for ref in ARMS[ARMS.index(arm) + 1:]:
                if (arm, tick) not in records or (ref, tick) not in records:
                    continue
                scores = {ref: list(tick_scores(records[ref, tick]).values()),
                          arm: list(tick_scores(records[arm, tick]).values())}
                out += [{**d, "tick": tick} for d in paired_differences(scores, reference=ref)]
    return out


def last_tick(root: Path) -> dict | None:
    """The latest record of ``ROOT/state/ticks.json`` (branch ``tick``), None without one."""
    path = root / TICKS_FILE
    try:
        ticks = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return ticks[-1] if isinstance(ticks, list) and ticks and isinstance(ticks[-1], dict) else None


# -- the streams on disk ------------------------------------------------------------------------

class Setup(NamedTuple):
    """A stream as the bench runs it: under ``folder``, the stream (``stream/``) whose files
    ``files[k]`` (relative to it) an arm's source folder (``<arm>/<source>``) gets at tick ``k``;
    the fixed tasks every model is scored on beside the held-out pairs; the pipeline each arm runs
    (a pipeline mapping, given that arm's source folder); the words' ticks (the demo); the ticks
    the ``full`` arm rebuilds at (empty: every one). (A named tuple: bench scripts are loaded
    by path in the tests, where a dataclass cannot find its module.)"""

    name: str
    folder: Path
    source: str
    files: list[list[str]]
    tasks: list[Path]
    pipeline: Callable[[Path], dict]
    introduced: dict[str, int]
    full_at: list[int]

    @property
    def ticks(self) -> int:
        return len(self.files) - 1

    def arm(self, arm: str) -> Path:
        return self.folder / arm

    def root(self, arm: str) -> Path:
        return self.arm(arm) / "root"

    def held(self, tick: int) -> Path:
        """The tick's held-out pairs as a BEIR folder (the task ``heldout``)."""
        return self.folder / "tasks" / f"t{tick:02d}" / "heldout"

    @property
    def first(self) -> Path:
        """Tick 0's held-out pairs again, as the task ``heldout-t0`` (forgetting)."""
        return self.folder / "tasks" / "heldout-t0"


def demo_setup(work: Path, seed: int, ticks: int, full_at: list[int] | None = None) -> Setup:
    """The demo stream of ``seed`` written under ``WORK/demo-sS-nN/stream``."""
    from mosaic_core.data.demo import demo_pipeline, make_stream
    from storage.demo import write_stream

    stream = make_stream(seed, ticks)
    folder = work / f"demo-s{seed}-n{ticks}"
    paths = write_stream(folder / "stream", stream)
    baseline = sorted(n for n in stream.files if n.startswith("baseline/"))
    files = [baseline, *([u, f"{u}.md5"] for u in stream.updates)]

    def pipeline(source: Path) -> dict:
        cfg = demo_pipeline(seed, str(paths["task"]), str(paths["glossary"]))
        return cfg.overridden({"source.kind": "pubmed", "source.source": str(source)}).model_dump(mode="json")
    return Setup(folder.name, folder, "snapshot", files, [paths["task"]], pipeline, stream.introduced, full_at or [])


def real_setup(work: Path, ticks: int, full_at: list[int] | None = None) -> Setup:
    """The real pairs' stream: :func:`real_split` written as ``stream/part-NN.jsonl``."""
    from storage.demo import write_files

    rows = read_rows(PAIRS)
    folder = work / f"real-n{ticks}"
    parts = {f"part-{k:02d}.jsonl": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part).encode()
             for k, part in enumerate(real_split(rows, ticks))}
    write_files(folder / "stream", parts)

    def pipeline(source: Path) -> dict:
        from mosaic_core.config import PipelineConfig

        return PipelineConfig.load({
            "base_model": BASE, "filter": {"model": BASE}, "domain": "biomedicine",
            "source": {"kind": "pairs", "path": str(source / "*.jsonl"), "query_column": "title",
                       "document_column": "abstract"},
            "eval_tasks": [{"kind": "beir", "name": "scifact", "path": str(SCIFACT)}]}).model_dump(mode="json")
    return Setup(folder.name, folder, "pairs", [[name] for name in parts], [SCIFACT], pipeline, {}, full_at or [])


def write_config(setup: Setup, arm: str) -> Path:
    """The arm's pipeline YAML (``<arm>/pipeline.yaml``), its source its own folder."""
    import yaml

    path = setup.arm(arm) / "pipeline.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(setup.pipeline(setup.arm(arm) / setup.source), sort_keys=False)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def advance(setup: Setup, arm: str, tick: int) -> None:
    """The arm's source folder holds the baseline and updates 1 … ``tick`` (unchanged files untouched)."""
    from storage.demo import write_files

    names = [n for group in setup.files[:tick + 1] for n in group]
    write_files(setup.arm(arm) / setup.source, {n: (setup.folder / "stream" / n).read_bytes() for n in names})


def source_tick(setup: Setup, arm: str) -> int:
    """The last tick whose files the arm's source folder holds (-1: not even the baseline's)."""
    have = setup.arm(arm) / setup.source
    done = -1
    for k, group in enumerate(setup.files):
        if not all((have / n).is_file() for n in group):
            break
        done = k
    return done


def heldout_pairs(root: Path, n_test: int, pool: int) -> tuple[list[tuple[str, str]], list[str]]:
    """The data root's test pairs and distractors as its held-out task takes them (its recorded split)."""
    from mosaic_core.trainer.heldout import Kept, Threshold, heldout_split
    from storage.heldout import recorded_thresholds
    from storage.pairs_io import pair_batches

    test, _ = recorded_thresholds(str(root), n_test, 0)
    kept = Kept(Threshold(*test) if test else None, None)
    pairs, distractors, _ = heldout_split(lambda: pair_batches(str(root)), n_test, pool, 0, "test", kept)
    return pairs, distractors


def write_heldout(setup: Setup, arm: str, tick: int, cfg: dict) -> None:
    """The tick's held-out task from ``arm``'s root (at tick 0 also as ``heldout-t0``), unless
    written already; beside it, which root it came from."""
    from storage.benchmarks import write_beir

    folders = [f for f in [setup.held(tick)] + ([setup.first] if tick == 0 else [])
               if not (f / "qrels" / "test.tsv").is_file()]
    if folders:
        pairs, distractors = heldout_pairs(setup.root(arm), cfg["train"]["heldout_pairs"], cfg["eval_pool"])
    for folder in folders:
        write_beir(folder, *content_task(pairs, distractors))
        _write(folder.parent / f"{folder.name}.json", {"from": arm, "tick": tick, "pairs": len(pairs)})


def same_heldout(setup: Setup, arm: str, tick: int, cfg: dict) -> bool:
    """Whether ``arm``'s root holds out the very pairs of the tick's task (written from another root)."""
    pairs, _ = heldout_pairs(setup.root(arm), cfg["train"]["heldout_pairs"], cfg["eval_pool"])
    queries = (setup.held(tick) / "queries.jsonl").read_text().splitlines()
    return set(content_task(pairs, [])[1]) == {json.loads(line)["_id"] for line in queries if line.strip()}


# -- running and scoring ------------------------------------------------------------------------

def run_command(setup: Setup, arm: str, config: Path) -> list[str]:
    """``mosaic run`` of the arm on its root: ``--full`` for the ``full`` arm (branch ``tick``)."""
    return _mosaic("run", "-c", str(config), "-d", str(setup.root(arm)), *([FULL_FLAG] if arm == "full" else []))


def check_full_flag() -> None:
    """Stop before any run when ``mosaic run`` has no ``--full`` (branch ``tick`` not merged)."""
    out = subprocess.run(_mosaic("run", "--help"), cwd=ROOT, capture_output=True, text=True).stdout
    if not re.search(rf"{FULL_FLAG}(?![\w-])", out):
        raise SystemExit(f"the full arm runs `mosaic run {FULL_FLAG}`, which this checkout's `mosaic run` does not "
                         "have (branch tick adds it): leave full out of --arms, or merge tick first")


def published(root: Path) -> Path:
    """The published model of a data root, resolved (the link moves at the next tick)."""
    current = root / "models" / "current"
    if not current.exists():
        raise SystemExit(f"{root}: no published model (models/current); see its report/ and logs")
    return current.resolve()


def score(setup: Setup, point: str, arm: str, model: Path, tick: int) -> tuple[list[dict], dict]:
    """``model`` scored by ``mosaic eval`` on the tick's held-out pairs, tick 0's (after tick 0)
    and the stream's fixed tasks (cached in WORK): per-query scores and the timing."""
    out = setup.folder / "eval" / point
    tasks = [setup.held(tick), *([setup.first] if tick else []), *setup.tasks]
    cmd = _mosaic("eval", "--model", f"{arm}={model}", *(a for t in tasks for a in ("--beir", str(t))),
                  "--out", str(out))
    timing = _once(setup.folder / "points" / f"eval-{point}.json", cmd, setup.folder / "logs" / f"eval-{point}.log")
    scores = json.loads((out / "results.json").read_text())["scores"][arm]
    for s in scores:
        s.pop("scores", None)
        s["per_query"] = {q: round(v, 6) for q, v in (s.get("per_query") or {}).items()}
    return scores, timing


def share_split(setup: Setup, arm: str) -> None:
    """Before the first run of the ``full`` arm's root: the ``update`` root's held-out record, so
    that both hold out the very same test and validation pairs (a fresh root would split afresh)."""
    mine, theirs = setup.root(arm) / "state" / "heldout.json", setup.root("update") / "state" / "heldout.json"
    if arm == "full" and not mine.is_file():
        if not theirs.is_file():
            raise SystemExit(f"{theirs}: the update arm's tick 0 has not run; run --arms update first")
        mine.parent.mkdir(parents=True, exist_ok=True)
        mine.write_bytes(theirs.read_bytes())


def baseline_model(results: Path, setup: Setup) -> Path:
    """The model ``update``'s tick 0 published (the baseline's full rebuild): the ``none`` arm's,
    copied to ``<stream>/none/model`` the first time (a data root keeps only its last published
    copies)."""
    import shutil

    kept = setup.arm("none") / "model"
    if kept.is_dir():
        return kept
    record = results / f"{point_id(setup, 'update', 0)}.json"
    if not record.is_file():
        raise SystemExit(f"{record}: the update arm's tick 0 has not run; run --arms update first")
    shutil.copytree(json.loads(record.read_text())["model"], kept)
    return kept


def point_id(setup: Setup, arm: str, tick: int) -> str:
    return f"{setup.name}-{arm}-t{tick:02d}"


def run_point(setup: Setup, results: Path, arm: str, tick: int, config: Path, cfg: dict) -> dict | None:
    """The (arm, tick) record, made when there is none: the arm's run at the tick (if it runs then),
    the tick's held-out task (from the first root at the tick), the scores. None when the arm
    has nothing at the tick (``full`` off ``--full-at``; ``none`` with no root at the tick to hold
    out pairs from)."""
    point = point_id(setup, arm, tick)
    if (results / f"{point}.json").is_file():
        return json.loads((results / f"{point}.json").read_text())
    root, timing, tick_record, decision, matches = setup.root(arm), None, None, None, None
    if tick in arm_ticks(arm, setup.ticks, setup.full_at):
        share_split(setup, arm)
        advance(setup, arm, tick)
        if source_tick(setup, arm) != tick:
            raise SystemExit(f"{setup.arm(arm)}: its source holds updates past tick {tick}; its root cannot be "
                             "scored at this tick any more (remove its points/ and root to start it again)")
        timing = _once(setup.folder / "points" / f"{point}.json", run_command(setup, arm, config),
                       setup.folder / "logs" / f"{arm}.log")
        tick_record = last_tick(root)
        report = root / "report" / "results.json"
        decision = json.loads(report.read_text())["decision"]["message"] if report.is_file() else None
        if (setup.held(tick) / "qrels" / "test.tsv").is_file():
            matches = same_heldout(setup, arm, tick, cfg)
        else:
            write_heldout(setup, arm, tick, cfg)
    elif arm != "none" or not tick or not (setup.held(tick) / "qrels" / "test.tsv").is_file():
        return None
    model = published(root) if arm != "none" else baseline_model(results, setup)
    scores, eval_timing = score(setup, point, arm, model, tick)
    data = {"point": point, "stream": setup.name, "arm": arm, "tick": tick, "machine": machine(), "run": timing,
            "tick_record": tick_record, "decision": decision, "model": str(model), "eval": eval_timing,
            "heldout_matches": matches, "words": sorted(words_by(setup.introduced, tick)),
            "new_words": sorted(words_by(setup.introduced, tick, new_only=True)), "scores": scores}
    _write(results / f"{point}.json", data)
    return data


# -- the tables ---------------------------------------------------------------------------------

def _cell(scores: dict[str, TaskScore], task: str) -> str:
    return f"{100 * scores[task].value:.2f}" if task in scores else "–"


def tick_table(records: dict[tuple[str, int], dict]) -> list[str]:
    """Markdown: per tick and arm, the run's wall time, what the tick did (``ticks.json``) and the
    scores (NDCG@10 × 100)."""
    lines = ["| tick | arm | kind | wall s | new pairs | pairs trained | " + " | ".join(TASKS) + " |",
             "| ---: | --- | --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in TASKS) + " |"]
    for (arm, tick), rec in sorted(records.items(), key=lambda kv: (kv[0][1], ARMS.index(kv[0][0]))):
        t = rec["tick_record"] or {}
        wall = f"{rec['run']['wall_s']:.0f}" if rec["run"] else "–"
        kind = t.get("kind", "n/a") if rec["run"] else "(tick 0's model)"
        scores = tick_scores(rec)
        lines.append(f"| {tick} | {arm} | {kind} | {wall} | {t.get('new_pairs', 'n/a')} | "
                     f"{t.get('pairs_trained', 'n/a')} | " + " | ".join(_cell(scores, task) for task in TASKS) + " |")
    return lines


def differences_table(records: dict[tuple[str, int], dict]) -> list[str]:
    """Markdown: :func:`comparisons` (× 100)."""
    lines = ["| tick | comparison | task | queries | Δ NDCG@10 × 100 | 95 % interval | above 0 |",
             "| ---: | --- | --- | ---: | ---: | --- | --- |"]
    for d in comparisons(records):
        lines.append(f"| {d['tick']} | {d['model']} − {d['reference']} | {d['task']} | {d['queries']} | "
                     f"{100 * d['mean']:+.2f} | [{100 * d['low']:+.2f}, {100 * d['high']:+.2f}] | "
                     f"{'yes' if d['low'] > 0 else 'no' if d['high'] >= 0 else 'below'} |")
    return lines


def load_records(results: Path, name: str) -> dict[tuple[str, int], dict]:
    """Every record of the stream ``name`` in RESULTS, by (arm, tick)."""
    out = {}
    for path in sorted(results.glob(f"{name}-*-t*.json")):
        rec = json.loads(path.read_text())
        if rec.get("stream") == name:
            out[rec["arm"], rec["tick"]] = rec
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/work/runs/continual"), help="data roots, tasks, logs")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the records (kept in the repository)")
    parser.add_argument("--ticks", type=int, default=10, help="update ticks after the baseline")
    parser.add_argument("--seed", type=int, default=0, help="the demo stream's seed")
    parser.add_argument("--real", action="store_true", help="the real biomedical pairs instead of the demo")
    parser.add_argument("--arms", default=",".join(ARMS), help="update, full and/or none, comma-separated")
    parser.add_argument("--full-at", default="", help="the ticks the full arm rebuilds at (default: every one)")
    parser.add_argument("--report-only", action="store_true", help="print the tables from the records only")
    args = parser.parse_args()
    arms = [a for a in ARMS if a in args.arms.split(",")]
    if unknown := set(args.arms.split(",")) - set(ARMS):
        parser.error(f"--arms: {', '.join(sorted(unknown))} unknown; choose from {', '.join(ARMS)}")
    if args.ticks < 1:
        parser.error("--ticks must be at least 1")
    work, results = args.work.resolve(), args.results.resolve()
    name = f"real-n{args.ticks}" if args.real else f"demo-s{args.seed}-n{args.ticks}"
    if not args.report_only:
        if args.real and not (PAIRS.is_file() and SCIFACT.is_dir()):
            raise SystemExit(f"{PAIRS} or {SCIFACT}: not found (the real data of ../shared/data)")
        if "full" in arms:
            check_full_flag()
        full_at = [int(k) for k in args.full_at.split(",") if k]
        setup = real_setup(work, args.ticks, full_at) if args.real else demo_setup(work, args.seed, args.ticks, full_at)
        (setup.folder / "logs").mkdir(parents=True, exist_ok=True)
        print(f"machine: {machine()}\nstream: {setup.folder}", flush=True)
        configs = {arm: write_config(setup, arm) for arm in arms}
        for tick in range(setup.ticks + 1):
            for arm in arms:
                cfg = setup.pipeline(setup.arm(arm) / setup.source)
                rec = run_point(setup, results, arm, tick, configs[arm], cfg)
                if rec is not None:
                    wall = f"{rec['run']['wall_s']:.0f} s" if rec["run"] else "scored only"
                    print(f"{rec['point']}: {wall}", flush=True)
    records = load_records(results, name)
    print("\n".join(["", f"## {name}", "", *tick_table(records), "", *differences_table(records)]))


if __name__ == "__main__":
    main()
