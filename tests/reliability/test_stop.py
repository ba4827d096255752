"""SIGTERM or SIGINT ends a run within seconds, in one line saying what is kept: the flows record
their end on the command's temporary server (which a signal to the command's process group does
not reach), then the command stops it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_run_s_group_ends_it_within_seconds(tmp_path, signum):
    run = subprocess.Popen([sys.executable, "-m", "cli", "run", "--data-root", str(tmp_path / "root")], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    said = []
    for line in run.stderr:  # the demo's first subflow has started: flows are talking to the server
        said.append(line)
        if "Beginning subflow run" in line:
            break
    server = [p for p in psutil.Process(run.pid).children(recursive=True) if "uvicorn" in " ".join(p.cmdline())]
    os.killpg(run.pid, signum)  # as ^C, `timeout` or a container stop signal the whole group
    sent = time.monotonic()
    said += run.stderr.readlines()
    run.wait(60)
    assert time.monotonic() - sent < 15, "".join(said[-20:])
    assert run.returncode == 128 + signum, "".join(said[-40:])
    assert f"stopped ({signal.Signals(signum).name}): every step that finished is kept" in "".join(said[-3:])
    assert server and not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in server)
