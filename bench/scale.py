"""How each step a user runs scales with the number of pairs (issue 51): wall time, peak memory
of the whole process tree, CPU time and the time to the first training step, at N = 10k, 100k
and 1M pairs on this machine, with a linear projection to a PubMed snapshot's 20M pairs.

    python bench/scale.py [--sizes 10k,100k,1M] [--steps vocab,train,eval] [--source biomed|demo]
        [--ref GITREF] [--work DIR] [--out DIR] [--record] [--max-rss-gb 20] [--report-only]

The pairs: N distinct (query, document) pairs in one Parquet file (WORK/pairs/), written in
batches, made by replicating the real biomedical pairs (``../shared/data/biomed``; ``--source
demo``: the demo generator's citations). Copy k > 0 of a pair has its abstract's sentences
rotated by k and `` (copy k)`` after the query and the document: every text and content hash
differs, and the vocabulary is the corpus's own (a number and ``copy`` are base tokens).

The steps, each one ``mosaic`` command in a process of its own, as a user runs it:

- **vocab**: ``mosaic vocab`` with the offline MiniLM, ``--distill-steps 10``, ``--prune 0``
  (issue 51 measured it so; ``--prune 0.3`` is the default a user gets);
- **train**: ``mosaic train --preset contrastive-only`` from the offline MiniLM for
  ``--train-steps`` steps, no hard negatives (validation pairs as the preset has them);
- **eval**: ``mosaic eval --heldout`` on the pairs, a pool of ``--pool`` documents;
- **mine** (not by default: it encodes every text, hours at 1M on 2 cores): ``mosaic train`` as
  above with one hard negative per pair, which it mines first, and one step;
- **filter** (not by default, the same reason): ``mosaic filter`` with the offline MiniLM.

Ingest (PubMed XML) is ``bench/ingest.py``'s. Per step: the wall time; the peak RSS of the whole
process tree (the RSS of the command and all its descendants, Prefect's server included, summed,
sampled every ``--interval`` s) and the largest VmHWM of one process (its own exact peak); CPU
time (user + system of the descendants waited for, ``getrusage``); the exit code; for train and
mine the seconds from start to its pairs read (``stage …: N training pairs``) and to the first
training step (``stage … step 1/…``, logged with ``log_every=1``), the step-0 validation of the
preset's validation pairs lying between the two. A step over ``--max-rss-gb`` or
``--step-timeout`` is killed and recorded as such; a failed step (the OOM killer's included) is
recorded and the benchmark goes on. Each step runs with a fresh ``PREFECT_HOME`` and output
folder, so nothing comes from a cache.

``--ref GITREF`` runs every step a second time with that revision's code (a ``git worktree`` in
a temporary folder, its modules first on the path, the same interpreter), step by step beside
the current working tree's, so that the before/after comparison comes from one machine and one
time (use a commit, not a moving name). One JSON record per (code, step, N) goes to ``--out``
(default WORK/records, a rerun overwriting its own); the report covers every record there, and
``--record`` copies them to ``bench/results/scale/``. Big files (pairs, models, logs) stay in
WORK (default: ``$TMPDIR/mosaic-scale``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # mosaic_core for the machine's precision and the demo pairs

from bench.machine import cpu_name  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
BIOMED = SHARED / "biomed" / "biomed_title_abstract.jsonl"
RESULTS = ROOT / "bench" / "results" / "scale"
BASE = "offline:all-MiniLM-L6-v2"
STEPS = ("vocab", "train", "eval", "mine", "filter")
DEFAULT_STEPS = "vocab,train,eval"
TARGET = 20_000_000
"""The pairs of a whole PubMed snapshot, which the projection is for."""
MIB = 2**20
LAUNCH = "import sys; sys.argv[0] = 'mosaic'; from cli import main; main()"
"""``mosaic`` run from whichever code is first on the path (the current tree's or the ref's)."""
IMPORTS = ("import json, cli, flows, mosaic_core, storage, tasks; "
           "print(json.dumps({m.__name__: m.__file__ for m in (cli, flows, mosaic_core, storage, tasks)}))")
TRAIN_MARKERS = {"pairs_read_s": re.compile(r"stage \S+: \d+ training pairs"),
                 "first_step_s": re.compile(r"stage \S+ step 1/\d+")}
"""Log lines of ``mosaic train`` timed from its start: its pairs read (``tasks/train.py``, before
the step-0 validation) and its first training step (the loop's, with ``log_every=1``)."""
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


# ---------------------------------------------------------------------------------------- pairs

def biomed_pairs(path: Path) -> list[tuple[str, str]]:
    """(title, abstract) of every record of the real JSONL that has both, each distinct pair once, in file order."""
    seen: dict[tuple[str, str], None] = {}
    with path.open() as fh:
        for line in fh:
            rec = json.loads(line)
            title, abstract = (rec.get("title") or "").strip(), (rec.get("abstract") or "").strip()
            if title and abstract:
                seen.setdefault((title, abstract))
    return list(seen)


def demo_pairs(work: Path) -> list[tuple[str, str]]:
    """(title, abstract) of every citation of the demo snapshot (seed 0) that has both."""
    from mosaic_core.data.demo import make_demo
    from mosaic_core.data.pubmed import Citation, iter_citations

    folder = work / "demo-snapshot"
    pairs: dict[tuple[str, str], None] = {}
    for name, data in sorted(make_demo(0).files.items()):
        if name.endswith(".xml"):
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            for c in iter_citations(path):
                if isinstance(c, Citation) and c.title.strip() and c.abstract().strip():
                    pairs.setdefault((c.title.strip(), c.abstract().strip()))
    return list(pairs)


def replica(query: str, document: str, k: int) -> tuple[str, str]:
    """Copy ``k`` of a pair: copy 0 is the pair itself; copy k > 0 has the document's sentences
    rotated by k and `` (copy k)`` after both texts, so it differs from every other copy."""
    if k == 0:
        return query, document
    sentences = SENTENCE_END.split(document)
    shift = k % len(sentences)
    rotated = " ".join(sentences[shift:] + sentences[:shift])
    return f"{query} (copy {k})", f"{rotated} (copy {k})"


def iter_replicas(sources: list[tuple[str, str]], n: int) -> Iterator[tuple[str, str]]:
    """``n`` pairs: every source pair once, then every source's copy 1, and so on."""
    for i in range(n):
        k, j = divmod(i, len(sources))
        yield replica(*sources[j], k)


def write_pairs(sources: list[tuple[str, str]], n: int, path: Path, batch: int = 50_000) -> Path:
    """``n`` replicated pairs as a Parquet file with ``query`` and ``document`` columns, written
    ``batch`` rows at a time (one row group each), atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("query", pa.string()), ("document", pa.string())])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    rows = iter_replicas(sources, n)
    with pq.ParquetWriter(tmp, schema) as writer:
        for start in range(0, n, batch):
            chunk = [next(rows) for _ in range(min(batch, n - start))]
            writer.write_table(pa.table({"query": [q for q, _ in chunk], "document": [d for _, d in chunk]},
                                        schema=schema))
    tmp.replace(path)
    return path


def pairs_file(source: str, n: int, work: Path) -> Path:
    """WORK's file of ``n`` pairs from ``source`` (biomed or demo), written once (it is deterministic)."""
    path = work / "pairs" / f"{source}-{n}.parquet"
    if not path.is_file():
        if source == "biomed" and not BIOMED.is_file():
            raise SystemExit(f"{BIOMED}: not found (the real data of ../shared/data); try --source demo")
        sources = biomed_pairs(BIOMED) if source == "biomed" else demo_pairs(work)
        t0 = time.perf_counter()
        write_pairs(sources, n, path)
        print(f"pairs: {n:,} from {len(sources):,} {source} pairs in {time.perf_counter() - t0:.1f} s "
              f"({path.stat().st_size / MIB:,.0f} MiB): {path}", flush=True)
    return path


# ------------------------------------------------------------------------------------ measuring

def _hwm(pid: int) -> int:
    """The peak RSS (VmHWM) of process ``pid`` so far, in bytes; 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(found.group(1)) * 1024 if found else 0


def tree_memory(root: psutil.Process) -> tuple[int, int]:
    """(the RSS of ``root`` and all its descendants, summed; the largest VmHWM among them), in bytes."""
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    rss, hwm = 0, 0
    for proc in procs:
        try:
            rss += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
        hwm = max(hwm, _hwm(proc.pid))
    return rss, hwm


class _Output(threading.Thread):
    """Copies a process's output to its log line by line, noting the seconds since ``t0`` at
    which each of ``markers`` (name → pattern) first matches."""

    def __init__(self, stream, log, markers: dict[str, re.Pattern], t0: float):
        super().__init__(daemon=True)
        self.stream, self.log, self.markers, self.t0 = stream, log, markers, t0
        self.seen: dict[str, float] = {}
        self.tail: list[str] = []

    def run(self) -> None:
        for raw in self.stream:
            line = raw.decode(errors="replace")
            for name, pattern in self.markers.items():
                if name not in self.seen and pattern.search(line):
                    self.seen[name] = round(time.perf_counter() - self.t0, 1)
            self.log.write(line)
            self.log.flush()
            self.tail = [*self.tail, line.rstrip()][-5:]


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL to the process group started for ``proc`` and to any descendant that left it."""
    try:
        strays = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        strays = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in strays:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def _watch(proc: subprocess.Popen, t0: float, limit: float | None, timeout: float | None,
           interval: float) -> tuple[int, int, str | None]:
    """Sample ``proc``'s tree until it ends: (peak summed RSS, peak single-process VmHWM, why it
    was killed or None); it is killed once its tree is over ``limit`` bytes or ``timeout`` seconds."""
    root, peak, hwm, killed = psutil.Process(proc.pid), 0, 0, None
    while proc.poll() is None:
        rss, top = tree_memory(root)
        peak, hwm = max(peak, rss), max(hwm, top)
        if limit is not None and rss > limit:
            killed = f"killed at {rss / 2**30:.1f} GB (over --max-rss-gb)"
        elif timeout is not None and time.perf_counter() - t0 > timeout:
            killed = f"killed after {timeout / 60:.0f} min (--step-timeout)"
        if killed:
            _kill_tree(proc)
            break
        time.sleep(interval)
    return peak, hwm, killed


def measure(cmd: list[str], cwd: Path, env: dict, log: Path, markers: dict[str, re.Pattern] | None = None,
            limit: float | None = None, timeout: float | None = None, interval: float = 0.2) -> dict:
    """Run ``cmd`` (output to ``log``) in a process group of its own, sampling its tree's memory;
    its exit code, status, wall and CPU seconds, peaks in MiB, and seconds to each of ``markers`` (None: not seen)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    with log.open("w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        output = _Output(proc.stdout, fh, markers or {}, t0)
        output.start()
        peak, hwm, killed = _watch(proc, t0, limit, timeout, interval)
        code = proc.wait()
        wall = time.perf_counter() - t0
        _kill_tree(proc)  # what it left running in its group (which would hold the output open)
        output.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"exit_code": code, "status": killed or status(code), "wall_s": round(wall, 1),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
            "peak_rss_mib": round(peak / MIB), "peak_process_mib": round(hwm / MIB),
            **{name: output.seen.get(name) for name in markers or {}}, "tail": [] if code == 0 else output.tail}


def status(code: int) -> str:
    """A step's outcome from its exit code: ok, killed by a signal (9: most likely the OOM killer), or failed."""
    if code == 0:
        return "ok"
    if code in (-signal.SIGKILL, 128 + signal.SIGKILL):
        return "killed by SIGKILL (the OOM killer?)"
    return f"killed by signal {-code}" if code < 0 else f"failed (exit {code})"


# ------------------------------------------------------------------------------------- running

def step_args(step: str, pairs: Path, out: Path, args: argparse.Namespace) -> list[str]:
    """The ``mosaic`` arguments of ``step`` on ``pairs``, writing under ``out``."""
    train = ["train", "--model", BASE, "--pairs", str(pairs), "--out", str(out / "train"),
             "--preset", "contrastive-only", "--set", "log_every=1"]
    return {
        "vocab": ["vocab", "--corpus", str(pairs), "--base-model", BASE, "--out", str(out / "model"),
                  "--distill-steps", str(args.distill_steps), "--prune", str(args.prune)],
        "train": [*train, "--set", f"max_steps={args.train_steps}", "--set", "hard_negatives=0"],
        "mine": [*train, "--set", "max_steps=1", "--set", "hard_negatives=1"],
        "eval": ["eval", "--model", f"base={BASE}", "--heldout", str(pairs), "--pool", str(args.pool),
                 "--out", str(out / "report")],
        "filter": ["filter", "--input", str(pairs), "--data-root", str(out / "root"), "--model", BASE],
    }[step]


def code_env(code: Path, prefect_home: Path) -> dict:
    """The environment of a command run from ``code``: its modules first on the path, a Prefect
    home of its own (no cache, no other run's database), no telemetry, log lines unwrapped."""
    path = os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PREFECT_HOME": str(prefect_home),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "COLUMNS": "300"}


def check_imports(code: Path, work: Path) -> dict[str, str]:
    """Where ``mosaic``'s packages import from when run from ``code``; exits unless every one is ``code``'s."""
    env = code_env(code, work / "prefect-imports")
    out = subprocess.run([sys.executable, "-c", IMPORTS], cwd=code, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{code}: the mosaic packages do not import:\n{out.stderr[-2000:]}")
    paths = json.loads(out.stdout.strip().splitlines()[-1])
    elsewhere = {m: p for m, p in paths.items() if not Path(p).resolve().is_relative_to(code.resolve())}
    if elsewhere:
        raise SystemExit(f"run from {code}, these packages import from elsewhere: {elsewhere}")
    return paths


def revision(code: Path) -> str:
    """``code``'s commit, with ``+changes`` where its tracked files differ from it."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=code, capture_output=True,
                            text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=code,
                           capture_output=True, text=True, check=True).stdout.strip()
    return commit + ("+changes" if dirty else "")


def run_step(code: dict, step: str, n: int, pairs: Path, args: argparse.Namespace) -> dict:
    """Run one step on ``n`` pairs with ``code`` (label, ref, root, commit, imports) in a fresh
    folder; its record, also written to ``--out``."""
    where = args.work / "runs" / code["label"] / f"{step}-{n}"
    shutil.rmtree(where, ignore_errors=True)
    cmd = [sys.executable, "-c", LAUNCH, *step_args(step, pairs, where / "out", args)]
    print(f"{code['label']} {step} {n:,}: running", flush=True)
    result = measure(cmd, code["root"], code_env(code["root"], where / "prefect"), where / "log.txt",
                     TRAIN_MARKERS if step in ("train", "mine") else None,
                     args.max_rss_gb * 2**30 if args.max_rss_gb else None,
                     args.step_timeout * 60 if args.step_timeout else None, args.interval)
    record = {"label": code["label"], "ref": code["ref"], "commit": code["commit"], "step": step, "n": n,
              "source": args.source, **result, "command": " ".join(cmd[3:]), "log": str(where / "log.txt"),
              "imports": code["imports"], "machine": args.machine}
    print(f"{code['label']} {step} {n:,}: {record['status']}, {record['wall_s']} s, "
          f"{record['peak_rss_mib']:,} MiB", flush=True)
    _write(args.out / f"{code['label']}_{step}_{n}.json", record)
    return record


def _write(path: Path, data: dict) -> None:
    """``data`` as JSON at ``path``, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(path)


def ref_worktree(ref: str, parent: Path) -> Path:
    """A ``git worktree`` of ``ref`` (detached) in ``parent``."""
    path = parent / "ref"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=ROOT, check=True,
                   capture_output=True, text=True)
    return path


def run_all(args: argparse.Namespace, ref_root: Path | None) -> list[dict]:
    """Every step at every size, with the current tree's code and (if given) the ref's, one after
    the other at each (size, step) so that both see the same machine load."""
    codes = [{"label": "current", "ref": None, "root": ROOT}]
    if ref_root is not None:
        codes.append({"label": "ref", "ref": args.ref, "root": ref_root})
    for code in codes:
        code["commit"], code["imports"] = revision(code["root"]), check_imports(code["root"], args.work)
        print(f"{code['label']}: {code['commit']} ({code['root']}), mosaic imports from {code['root']}", flush=True)
    records = []
    for n in args.sizes:
        pairs = pairs_file(args.source, n, args.work)
        for step in args.steps:
            records += [run_step(code, step, n, pairs, args) for code in codes]
    return records


# ------------------------------------------------------------------------------------ reporting

def machine() -> dict:
    """This machine: CPU, cores, memory, torch, and the precision ``precision=auto`` resolves on its CPU."""
    import torch

    from mosaic_core.modeling.encode import resolve_precision

    dtype = resolve_precision("auto", torch.device("cpu"))
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "precision": "bf16" if dtype is torch.bfloat16 else "fp32", "platform": platform.platform()}


def _num(x: float | None, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def table(records: list[dict]) -> str:
    """One Markdown row per (code, step, N): status, wall and CPU seconds, peak RSS, wall per 1k
    pairs, seconds to the pairs read and to the first training step (train and mine)."""
    lines = ["| code | step | N | status | wall s | CPU s | peak RSS MiB (tree) | largest process MiB "
             "| wall s / 1k pairs | pairs read s | first step s |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(records, key=lambda r: (code_of(r), r["step"], r["n"])):
        lines.append(f"| {code_of(r)} | {r['step']} | {r['n']:,} | {r['status']} | {r['wall_s']:.1f} "
                     f"| {r['cpu_s']:.1f} | {r['peak_rss_mib']:,} | {r['peak_process_mib']:,} "
                     f"| {1000 * r['wall_s'] / r['n']:.2f} | {_num(r.get('pairs_read_s'), '.1f')} "
                     f"| {_num(r.get('first_step_s'), '.1f')} |")
    return "\n".join(lines)


def code_of(record: dict) -> str:
    """Which code a record measured: ``current`` or ``ref``, and its commit."""
    return f"{record['label']} {record['commit']}"


def _series(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """The steps that ended ok, per (code, step), by N."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in sorted(records, key=lambda r: r["n"]):
        if r["status"] == "ok":
            out.setdefault((code_of(r), r["step"]), []).append(r)
    return out


def ratios(records: list[dict]) -> list[dict]:
    """Between consecutive sizes of each (code, step) that ended ok: peak RSS and wall per pair, larger / smaller."""
    out = []
    for (code, step), line in sorted(_series(records).items()):
        for a, b in zip(line, line[1:], strict=False):
            out.append({"code": code, "step": step, "from": a["n"], "to": b["n"],
                        "rss": b["peak_rss_mib"] / a["peak_rss_mib"],
                        "wall_per_pair": (b["wall_s"] / b["n"]) / (a["wall_s"] / a["n"])})
    return out


def linear_at(a: dict, b: dict, key: str, n: int) -> float:
    """``key`` at ``n`` pairs on the line through records ``a`` and ``b`` (by their ``n``)."""
    return b[key] + (b[key] - a[key]) / (b["n"] - a["n"]) * (n - b["n"])


def projection(records: list[dict], target: int = TARGET) -> list[dict]:
    """Per (code, step): wall seconds and peak RSS at ``target`` pairs, on the line through its two
    largest sizes that ended ok."""
    out = []
    for (code, step), line in sorted(_series(records).items()):
        if len(line) < 2:
            continue
        a, b = line[-2], line[-1]
        out.append({"code": code, "step": step, "from": (a["n"], b["n"]), "n": target,
                    **{key: linear_at(a, b, key, target) for key in ("wall_s", "peak_rss_mib")}})
    return out


def versus(records: list[dict]) -> list[dict]:
    """Per (step, N) measured with both codes: each one's status and peak RSS, and the current
    code's peak RSS and wall time over the ref's (None unless both ended ok)."""
    by = {(r["label"], r["step"], r["n"]): r for r in records}
    out = []
    for step, n in sorted({(s, n) for label, s, n in by if label == "current" and ("ref", s, n) in by}):
        cur, ref = by["current", step, n], by["ref", step, n]
        ok = cur["status"] == ref["status"] == "ok"
        out.append({"step": step, "n": n, "ref": ref, "current": cur,
                    "rss": cur["peak_rss_mib"] / ref["peak_rss_mib"] if ok else None,
                    "wall": cur["wall_s"] / ref["wall_s"] if ok else None})
    return out


def report(records: list[dict]) -> str:
    """The table, the ratios between sizes, the projection and (with a ref) current against ref, as Markdown."""
    parts = [table(records), "", "Larger / smaller size (steps that ended ok):", "",
             "| code | step | N | peak RSS × | wall per pair × |", "| --- | --- | --- | ---: | ---: |"]
    parts += [f"| {r['code']} | {r['step']} | {r['from']:,} → {r['to']:,} | {r['rss']:.2f} | {r['wall_per_pair']:.2f} |"
              for r in ratios(records)]
    parts += ["", f"Projected to {TARGET:,} pairs (linear through the two largest sizes that ended ok):", "",
              "| code | step | from N | wall h | peak RSS GiB |", "| --- | --- | --- | ---: | ---: |"]
    parts += [f"| {p['code']} | {p['step']} | {p['from'][0]:,}, {p['from'][1]:,} | {p['wall_s'] / 3600:,.1f} "
              f"| {p['peak_rss_mib'] / 1024:,.1f} |" for p in projection(records)]
    rows = versus(records)
    if rows:
        parts += ["", "Current against ref:", "", "| step | N | ref | current | peak RSS × | wall × |",
                  "| --- | ---: | --- | --- | ---: | ---: |"]
        parts += [f"| {v['step']} | {v['n']:,} | {v['ref']['status']}, {v['ref']['peak_rss_mib']:,} MiB "
                  f"| {v['current']['status']}, {v['current']['peak_rss_mib']:,} MiB | {_num(v['rss'], '.2f')} "
                  f"| {_num(v['wall'], '.2f')} |" for v in rows]
    return "\n".join(parts)


def describe(m: dict) -> str:
    """The machine line printed above the table."""
    return (f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; torch {m['torch']} "
            f"({m['torch_threads']} threads); precision=auto resolves {m['precision']} on this CPU")


# ----------------------------------------------------------------------------------------- main

def parse_size(text: str) -> int:
    """``10000``, ``10k`` or ``1M`` as a number of pairs."""
    text = text.strip().replace("_", "").replace(",", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:].lower(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10k,100k,1M", help="numbers of pairs, comma-separated (10k, 1M, 20000)")
    ap.add_argument("--steps", default=DEFAULT_STEPS, help=f"comma-separated, of {', '.join(STEPS)}")
    ap.add_argument("--source", choices=("biomed", "demo"), default="biomed", help="pairs to replicate")
    ap.add_argument("--ref", help="also run every step with this git revision's code (before/after)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "mosaic-scale",
                    help="pairs, models, logs (big files: not the repository)")
    ap.add_argument("--out", type=Path, default=None, help="the JSON records (default: WORK/records)")
    ap.add_argument("--record", action="store_true", help=f"copy the records to {RESULTS.relative_to(ROOT)}")
    ap.add_argument("--report-only", action="store_true", help="run nothing: tabulate the records in --out")
    ap.add_argument("--max-rss-gb", type=float, default=20.0, help="kill a step whose tree is over this (0: never)")
    ap.add_argument("--step-timeout", type=float, default=None, help="kill a step after this many minutes")
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between memory samples")
    ap.add_argument("--train-steps", type=int, default=3, help="optimizer steps of the train step")
    ap.add_argument("--distill-steps", type=int, default=10, help="mosaic vocab --distill-steps")
    ap.add_argument("--prune", type=float, default=0.0, help="mosaic vocab --prune (a user's default: 0.3)")
    ap.add_argument("--pool", type=int, default=1000, help="mosaic eval --pool")
    args = ap.parse_args(argv)
    args.sizes = sorted(parse_size(s) for s in args.sizes.split(",") if s.strip())
    args.steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = sorted(set(args.steps) - set(STEPS))
    if unknown:
        ap.error(f"--steps: unknown {unknown}; choose from {', '.join(STEPS)}")
    args.work = args.work.resolve()
    args.out = (args.out or args.work / "records").resolve()
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not args.report_only:
        args.machine = machine()
        print(describe(args.machine), flush=True)
        with tempfile.TemporaryDirectory(prefix="mosaic-scale-ref-") as tmp:
            ref_root = ref_worktree(args.ref, Path(tmp)) if args.ref else None
            try:
                run_all(args, ref_root)
            finally:
                if ref_root is not None:
                    subprocess.run(["git", "worktree", "remove", "--force", str(ref_root)], cwd=ROOT, check=False)
    records = [json.loads(p.read_text()) for p in sorted(args.out.glob("*.json"))]
    if not records:
        raise SystemExit(f"{args.out}: no records")
    for m in sorted({describe(r["machine"]) for r in records}):
        print(m)
    print(report(records))
    if args.record:
        RESULTS.mkdir(parents=True, exist_ok=True)
        for p in sorted(args.out.glob("*.json")):
            shutil.copy2(p, RESULTS / p.name)
        print(f"records copied to {RESULTS}")


if __name__ == "__main__":
    main()
