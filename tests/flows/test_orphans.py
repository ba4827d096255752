"""A deployment run's process stops when its serve or worker dies: SIGTERM within seconds (so
its flows record their end and the lock is released), SIGKILL if that is not enough."""

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]

_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
print(child.pid, flush=True)
time.sleep(600)
"""

_CHILD = """
import signal, sys, time
from flows.orphans import stop_with_parent
if sys.argv[1] == "graceful":
    def stop(signum, frame):
        print("SIGTERM", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
else:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a run that does not stop on SIGTERM
stop_with_parent(poll_s=0.2, grace_s=2)
while True:
    sum(range(100_000))
"""


@pytest.mark.parametrize("child", ["graceful", "stuck"])
def test_a_run_stops_within_seconds_of_its_parent_dying(child):
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, _CHILD, child], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    orphan = psutil.Process(int(parent.stdout.readline()))
    time.sleep(1)
    assert orphan.is_running() and orphan.ppid() == parent.pid
    parent.kill()
    parent.wait()
    orphan.wait(timeout=10)  # psutil.TimeoutExpired if it outlived its parent
    assert parent.stdout.read().strip() == ("SIGTERM" if child == "graceful" else "")  # else: SIGKILL, 2 s later
