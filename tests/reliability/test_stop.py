"""SIGTERM or SIGINT ends a run within seconds, whenever it lands, in one line saying what is kept:
the flows record their end on the command's temporary server (which a signal to the command's
process group does not reach), then the command stops it. A flow run that `mosaic serve` or a
worker started (`python -m prefect.engine`) ends too, and its data root's lock is free."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
QUICK_VOCAB = ["--set", "vocab.distill.max_steps=4"]
SHORT = [*QUICK_VOCAB, "--set", "control=none", "--set", "train.stages.0.max_steps=4",
         "--set", "train.stages.1.max_steps=4"]
"""The demo with a few steps a stage and no control: the same flows, minutes sooner at evaluation."""
MOMENTS = {  # the line after which the signal is sent, and the run's options
    "first-subflow": ("Beginning subflow run", []),  # flows are talking to the server, tasks starting
    "training": ("mosaic_core.trainer.stage", QUICK_VOCAB),  # a stage begins its steps
    "evaluation": ("tasks.evaluate", SHORT),  # a model is scored on a task, the next one loading
}
slow = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.mark.parametrize("moment, signum", [
    pytest.param("first-subflow", signal.SIGTERM, id="first-subflow-SIGTERM"),
    pytest.param("first-subflow", signal.SIGINT, id="first-subflow-SIGINT"),
    pytest.param("training", signal.SIGTERM, id="training-SIGTERM", marks=slow),
    pytest.param("training", signal.SIGINT, id="training-SIGINT", marks=slow),
    pytest.param("evaluation", signal.SIGTERM, id="evaluation-SIGTERM", marks=slow),
])
def test_a_signal_to_the_run_s_group_ends_it_within_seconds(tmp_path, moment, signum):
    mark, options = MOMENTS[moment]
    run = subprocess.Popen([sys.executable, "-m", "cli", "run", "--data-root", str(tmp_path / "root"), *options],
                           cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    said = []
    for line in run.stderr:
        said.append(line)
        if mark in line:
            break
    else:
        pytest.fail(f"the run ended (exit {run.wait()}) before {moment}:\n" + "".join(said[-20:]))
    server = [p for p in psutil.Process(run.pid).children(recursive=True) if "uvicorn" in " ".join(p.cmdline())]
    os.killpg(run.pid, signum)  # as ^C, `timeout` or a container stop signal the whole group
    sent = time.monotonic()
    said += run.stderr.readlines()
    run.wait(60)
    assert time.monotonic() - sent < 15, "".join(said[-20:])
    assert run.returncode == 128 + signum, "".join(said[-40:])
    assert f"stopped ({signal.Signals(signum).name}): every step that finished is kept" in "".join(said[-3:])
    assert server and not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in server)


SERVED = """
import time
from pathlib import Path

from prefect import flow, task
import prefect.task_engine as task_engine

from storage.lock import root_lock


@task
def step(i):
    return i


@flow
def served_writer(root: str, ready: str):
    create = task_engine._create_task_run_locally

    def waits_for_the_signal(*args, **kwargs):  # the moment a task run is being created
        task_engine._create_task_run_locally = create
        Path(ready).touch()
        time.sleep(60)
        return create(*args, **kwargs)

    with root_lock(root, "served flow"):
        task_engine._create_task_run_locally = waits_for_the_signal
        try:
            step(0)
        except Exception:  # a failed step taken in its stride, as Prefect's 'Task run is not set' is
            pass
        for i in range(60):  # what the run goes on to do if the signal is lost: 30 s of steps
            step(i)
            time.sleep(0.5)
"""


@pytest.mark.usefixtures("prefect_harness")
def test_sigterm_to_a_served_flow_run_ends_it_and_frees_the_data_root(tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.flows import load_flow_from_entrypoint
    from prefect.settings import PREFECT_API_URL

    from storage.lock import root_lock

    (tmp_path / "served.py").write_text(textwrap.dedent(SERVED))
    entrypoint = f"{tmp_path / 'served.py'}:served_writer"
    root, ready = tmp_path / "root", tmp_path / "ready"
    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run(load_flow_from_entrypoint(entrypoint),
                                          parameters={"root": str(root), "ready": str(ready)})
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT__FLOW_RUN_ID": str(flow_run.id),
           "PREFECT__FLOW_ENTRYPOINT": entrypoint, "PYTHONPATH": str(REPO)}
    run = subprocess.Popen([sys.executable, "-m", "prefect.engine"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)  # as the runner of `mosaic serve` starts it
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.exists(), run.stderr.read() if run.poll() is not None else "no task run began in 120 s"
        run.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        said = run.communicate(timeout=60)[1]
    finally:
        run.kill()
    assert time.monotonic() - sent < 15, said[-3000:]
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(flow_run.id).state.is_crashed(), said[-3000:]
    with root_lock(root, "test", wait=0):  # RootBusy if the flow run still held it
        pass
