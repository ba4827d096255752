"""Crashes and kills: nothing left running, nothing half-written left behind, work resumed."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from builders import article, pubmed_xml, stage1_config, tiny_bert, write_xml

from flows.ingest import ingest_flow
from mosaic_core.config import IngestConfig
from storage.layout import DataLayout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ABS = ("We studied a large cohort of patients with the disease over several years and report that the new "
       "treatment reduced the rate of the primary outcome compared with standard care in every subgroup.")


def start(*args: str, home) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**env, "PREFECT_HOME": str(home)})


def server_of(proc: subprocess.Popen, timeout: float = 120) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in psutil.Process(proc.pid).children(recursive=True):
            if "uvicorn" in " ".join(child.cmdline()):
                return child
        time.sleep(0.2)
    raise AssertionError("no temporary Prefect server appeared")


def test_the_temporary_prefect_server_dies_with_a_killed_command(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"query {i}", "document": f"document {i}"}) + "\n"
                             for i in range(20)))
    proc = start("filter", "--input", str(pairs), "-d", str(tmp_path / "root"), "--model",
                 "offline:all-MiniLM-L6-v2", home=tmp_path / "home")
    server = server_of(proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    server.wait(timeout=15)  # psutil.TimeoutExpired if it outlived the command
    assert not server.is_running()


@pytest.mark.usefixtures("prefect_harness")
def test_a_stage_removes_the_unfinished_files_a_killed_run_left(tmp_path):
    src, root = tmp_path / "src", tmp_path / "root"
    write_xml(src / "pubmed26n0001.xml.gz", pubmed_xml([article(1, title="An article about outcomes here",
                                                                abstract=ABS)]))
    ingest_flow(IngestConfig(source=str(src)), str(root), progress=False)
    layout = DataLayout(root)
    part = layout.partition_path("citations", "pubmed26n0001")
    stale = [part.with_name(f".part.parquet.{'a' * 32}.tmp"), layout.raw_dir / f".x.xml.gz.{'b' * 32}.part",
             layout.manifest_dir("ingest") / f".pubmed26n0001.json.{'c' * 32}.tmp"]
    keep = part.with_name("notes.tmp")  # not an unfinished write of ours: left alone
    for path in [*stale, keep]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half a file")
    manifests = ingest_flow(IngestConfig(source=str(src)), str(root), progress=False)
    assert not any(p.exists() for p in stale) and keep.exists()
    assert [m.kept for m in manifests] == [1]


@pytest.mark.slow
def test_a_training_stage_killed_mid_run_resumes_from_its_checkpoint(tmp_path):
    from mosaic_core.vocab.build import build_expanded_model

    pairs = tmp_path / "pairs.jsonl"
    words = ["cardiomyopathy", "immunotherapy", "hepatocytes", "nephropathy"]
    pairs.write_text("".join(json.dumps({"query": f"{w} in patient {i}", "document": f"the patient with {w} {i}"})
                             + "\n" for i in range(30) for w in words))
    build_expanded_model([f"{w} in the patient" for w in words] * 20, tmp_path / "stage1",
                         stage1_config(tiny_bert(tmp_path / "base"), vocab_size=200))
    args = ("train", "--model", str(tmp_path / "stage1"), "--pairs", str(pairs), "--out", str(tmp_path / "out"),
            "--preset", "contrastive-only", "--set", "max_steps=400", "--set", "batch_size=8",
            "--set", "checkpoint_every=5", "--set", "precision=fp32", "--heldout-pairs", "4",
            "--validation-pairs", "4")
    proc = start(*args, home=tmp_path / "home")
    checkpoints = tmp_path / "out" / "1-contrastive" / "checkpoints"
    deadline = time.monotonic() + 300
    while not list(checkpoints.glob("step-*")) and time.monotonic() < deadline:
        time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list(checkpoints.glob("step-*"))
    done = subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**{k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"},
                               "PREFECT_HOME": str(tmp_path / "home")}, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads((tmp_path / "out" / "1-contrastive" / "stage.json").read_text())["result"]
    assert record["steps"] == 400 and record["resumed_from"] is not None and not checkpoints.exists()
