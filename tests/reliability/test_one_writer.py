"""A data root left running unattended: one writer at a time, a dead writer's lock taken over,
a busy scheduled tick skipped, no pickle persisted or read, failures inside flows told briefly.
Each probe runs real processes: a lock holder in a subprocess, the `mosaic` entry point."""

import base64
import json
import os
import pickle
import signal
import subprocess
import sys
import time

import pytest
from builders import article, pubmed_xml, write_xml

from flows.ingest import ingest_flow
from mosaic_core.config import IngestConfig
from storage.layout import DataLayout
from storage.lock import LOCK_FILE, holder, is_held, root_lock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ABS = ("We studied a large cohort of patients with the disease over several years and report that the new "
       "treatment reduced the rate of the primary outcome compared with standard care in every subgroup.")
HOLD = """
import sys, time
from storage.lock import root_lock
with root_lock(sys.argv[1], "mosaic run"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def hold(root, seconds: float = 300) -> subprocess.Popen:
    """Another process holding ``root``'s lock (as `mosaic run`) for ``seconds``; returns once it holds it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root), str(seconds)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def mosaic(*args: str, home) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**env, "COLUMNS": "200", "PREFECT_HOME": str(home)}, timeout=600)


@pytest.fixture
def snapshot(tmp_path):
    src = tmp_path / "src"
    write_xml(src / "pubmed26n0001.xml.gz", pubmed_xml([article(i, title=f"An article about outcomes number {i}",
                                                                abstract=ABS) for i in range(1, 4)]))
    return src


def test_a_second_writer_is_told_who_holds_the_root_and_touches_nothing(tmp_path, snapshot):
    root = tmp_path / "root"
    writing = root / "citations" / "source=pubmed26n0001" / f".part.parquet.{'a' * 32}.tmp"
    first = hold(root)
    writing.parent.mkdir(parents=True)
    writing.write_bytes(b"the first writer's unfinished partition")  # what it is writing now
    try:
        done = mosaic("ingest", "--source", str(snapshot), "-d", str(root), home=tmp_path / "home")
        assert holder(root)["command"] == "mosaic run"
    finally:
        first.kill()
        first.wait()
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    assert f"data root {root} is in use by `mosaic run` (pid {first.pid} on" in out and "use --wait" in out, out
    assert len(out.strip().splitlines()) < 20, out
    assert writing.read_bytes() == b"the first writer's unfinished partition"  # not cleaned up under its feet
    assert not (root / "manifests").exists()


def test_wait_takes_the_root_once_the_other_writer_is_done(tmp_path, snapshot):
    root = tmp_path / "root"
    first = hold(root, seconds=20)  # longer than the CLI takes to start on a loaded 2-core machine (3 s was not)
    done = mosaic("ingest", "--source", str(snapshot), "-d", str(root), "--wait", home=tmp_path / "home")
    first.wait()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "is in use by `mosaic run`" in done.stdout + done.stderr  # it said what it waited for
    assert DataLayout(root).manifest_path("ingest", "pubmed26n0001").is_file()
    assert holder(root) == {}  # released cleanly


def test_a_killed_holders_lock_is_taken_over_with_a_warning(tmp_path, caplog):
    root = tmp_path / "root"
    stale = root / "filtered" / f".part.parquet.{'b' * 32}.tmp"
    stale.parent.mkdir(parents=True)
    dead = hold(root)
    stale.write_bytes(b"left by the killed writer")
    # a half-copied publish and a checkpoint being saved (folders), a distillation state being written
    copy = root / "models" / "published" / f".run-1.{'c' * 32}.tmp"
    checkpoint = root / "models" / "1-joint" / "checkpoints" / f".step-00000200.{'d' * 32}.tmp"
    state = root / "models" / "stage1" / f".distill-state.pt.{'e' * 32}.tmp"
    for folder in (copy, checkpoint):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "weights.bin").write_bytes(b"half")
    state.parent.mkdir(parents=True)
    state.write_bytes(b"half")
    kept = root / "models" / "published" / "run-0" / ".keep.tmp"  # no uuid: not an unfinished write
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"")
    os.kill(dead.pid, signal.SIGKILL)
    dead.wait()
    assert holder(root)["pid"] == dead.pid  # its record outlives it; the kernel released its lock
    with caplog.at_level("WARNING", logger="storage.lock"), root_lock(root, "mosaic ingest"):
        assert is_held(root) and holder(root)["pid"] == os.getpid()
        assert not stale.exists()  # a dead writer's unfinished file is removed once the lock is ours
        assert not copy.exists() and not checkpoint.exists() and not state.exists() and kept.exists()
    assert f"took over the lock left by `mosaic run` (pid {dead.pid}" in caplog.text
    assert "no longer running" in caplog.text and "removed 4 unfinished file" in caplog.text
    assert not is_held(root) and holder(root) == {}


def test_the_lock_is_reentrant_in_a_process_and_exclusive_across_processes(tmp_path):
    root = tmp_path / "root"
    with root_lock(root, "mosaic run"), root_lock(root, "ingest flow"):  # the pipeline and its stage flows
        assert holder(root)["command"] == "mosaic run"
        other = subprocess.run([sys.executable, "-c", HOLD, str(root), "0"], cwd=ROOT, capture_output=True, text=True)
        assert other.returncode == 1 and "RootBusy: data root" in other.stderr
    assert not is_held(root)
    with pytest.raises(NotADirectoryError, match="is a file"):
        with root_lock(root / LOCK_FILE, "mosaic run"):
            pass


@pytest.mark.usefixtures("prefect_harness")
def test_a_scheduled_tick_on_a_busy_root_is_skipped_not_failed(tmp_path):
    from flows.rebuild import rebuild

    root = tmp_path / "root"
    other = hold(root)
    try:
        state = rebuild(data_root=str(root), return_state=True)
    finally:
        other.kill()
        other.wait()
    assert state.is_completed() and state.name == "Skipped", state
    assert "in use by `mosaic run`" in state.message and "the next scheduled or triggered run" in state.message
    assert "--wait" not in state.message  # an option of the command line, not of a deployment's run
    assert not (root / "demo").exists()  # nothing of the rebuild ran


def _pickle_record(payload) -> bytes:
    return json.dumps({"metadata": {"storage_key": "x", "expiration": None, "serializer": {"type": "pickle"},
                                    "prefect_version": "3.8.8", "storage_block_id": None},
                       "result": base64.b64encode(pickle.dumps(payload)).decode()}).encode()


class _Marker:
    """Unpickling it creates a file: proof that a pickle was read."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.usefixtures("prefect_harness")
def test_task_results_are_json_and_a_planted_pickle_is_never_read(tmp_path, snapshot, caplog):
    root = tmp_path / "root"
    ingest_flow(IngestConfig(source=str(snapshot)), str(root), progress=False)
    records = list(DataLayout(root).results_dir.iterdir())
    assert records and all(json.loads(r.read_bytes())["metadata"]["serializer"]["type"] == "json" for r in records)
    marker = tmp_path / "code-ran"
    records[0].write_bytes(_pickle_record(_Marker(str(marker))))
    with caplog.at_level("WARNING", logger="tasks.results"):
        (manifest,) = ingest_flow(IngestConfig(source=str(snapshot)), str(root), progress=False)
    assert not marker.exists()
    assert "is not a JSON result record" in caplog.text
    assert manifest.kept == 3
    assert json.loads(records[0].read_bytes())["metadata"]["serializer"]["type"] == "json"  # replaced


def test_a_failure_inside_a_flow_is_told_in_a_few_lines_with_the_log_named(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"query {i}", "document": f"document {i}"}) + "\n"
                             for i in range(8)))
    broken = tmp_path / "broken-model"  # passes the up-front check (a config.json), fails inside the encode task
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "bert", "hidden_size": 8}')
    done = mosaic("filter", "--input", str(pairs), "-d", str(tmp_path / "root"), "--model", str(broken),
                  home=tmp_path / "home")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "Traceback" not in out and len(out.strip().splitlines()) < 25, out
    log = out.split("full log with the traceback: ")[1].split(" (or rerun")[0]
    assert "Traceback" in open(log).read()


def test_an_unreachable_dask_scheduler_is_named_at_once(tmp_path, snapshot):
    started = time.monotonic()
    done = mosaic("ingest", "--source", str(snapshot), "-d", str(tmp_path / "root"), "--dask-address",
                  "tcp://127.0.0.1:9", home=tmp_path / "home")
    out = done.stdout + done.stderr
    assert done.returncode == 2 and "Dask scheduler tcp://127.0.0.1:9 does not answer" in out, out
    assert len(out.strip().splitlines()) < 5, out
    print(f"unreachable scheduler reported in {time.monotonic() - started:.1f} s")


def test_a_json_record_naming_a_foreign_decoder_or_class_is_not_trusted():
    from tasks.results import is_json_record

    def record(result: str, **serializer) -> bytes:
        return json.dumps({"metadata": {"serializer": {"type": "json", **serializer}}, "result": result}).encode()

    ours = json.dumps({"__class__": "storage.manifest.Manifest", "data": {"kept": 1}})
    assert is_json_record(record(ours)) and is_json_record(record('{"steps": 3}'))
    assert not is_json_record(record(ours, object_decoder="os.system"))
    assert not is_json_record(record(ours.replace("storage.manifest.Manifest", "subprocess.Popen")))
    assert not is_json_record(record(ours)[:-20])  # cut short by a killed run
    assert not is_json_record(_pickle_record({"a": 1}))
