"""A stop signal ends a :func:`storage.stopping.stops_honoured` block wherever it lands, also where
the exception its handler raised is lost: in a finalizer, in code that catches it, and in
Prefect's engine (a subflow run that is final, a task run being created). Each case runs in a
process of its own, set up as ``mosaic`` sets up a command that runs flows."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SETUP = """
import os, signal, sys, time
from storage.stopping import STOP_SIGNALS, raise_stopped, stop_signal, stops_honoured
for signum in STOP_SIGNALS:
    signal.signal(signum, raise_stopped)

def send(signum):
    global sent
    sent = time.monotonic()
    os.kill(os.getpid(), signum)
    time.sleep(0.05)  # its handler runs here, in the code that called send

class Dropped:
    def __del__(self):
        send(signal.SIGTERM)

def outcome(name, work):
    global sent
    sent = None
    try:
        with stops_honoured():
            work()
        said = "completed"
    except BaseException as exc:
        said = f"stopped {signal.Signals(stop_signal(exc)).name}" if stop_signal(exc) else repr(exc)
    print(f"{name}: {said} {time.monotonic() - sent:.1f} s after the signal", flush=True)
"""


def run(script: str, env: dict | None = None) -> dict[str, str]:
    """{case: what became of it} as the script printed them."""
    done = subprocess.run([sys.executable, "-c", SETUP + textwrap.dedent(script)], cwd=REPO, capture_output=True,
                          text=True, timeout=180, env={**os.environ, **(env or {})})
    cases = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    assert cases, done.stdout + done.stderr
    return cases


def stopped_within(said: str, signame: str, seconds: float) -> bool:
    words = said.split()
    return words[:2] == ["stopped", signame] and float(words[2]) < seconds


def test_a_stop_lost_in_a_finalizer_or_caught_is_sent_again_and_ends_the_block():
    cases = run("""
        def finalizer():
            Dropped()  # its __del__ runs at once: the Stopped raised there is only printed
            time.sleep(20)
        def caught():
            try:
                send(signal.SIGINT)
            except BaseException:
                pass
            time.sleep(20)
        def caught_at_the_end():
            try:
                send(signal.SIGINT)
            except BaseException:
                pass
        outcome("finalizer", finalizer)
        outcome("caught", caught)
        outcome("caught at the end", caught_at_the_end)
    """)
    assert stopped_within(cases["finalizer"], "SIGTERM", 10), cases
    assert stopped_within(cases["caught"], "SIGINT", 10), cases
    assert stopped_within(cases["caught at the end"], "SIGINT", 1), cases


def test_a_second_signal_does_not_cut_the_clean_up_of_a_stop_short():
    cases = run("""
        def cleaning_up():
            try:
                send(signal.SIGTERM)
            finally:
                send(signal.SIGINT)  # a second ^C while the first stop's clean-up runs
                print("clean-up: done", flush=True)
        outcome("twice", cleaning_up)
    """)
    assert cases["clean-up"] == "done", cases
    assert stopped_within(cases["twice"], "SIGTERM", 1), cases


def test_a_forked_child_s_signal_does_not_stop_the_parent():
    cases = run("""
        def fork_and_stop_the_child():
            global sent
            ready, started = os.pipe()
            child = os.fork()
            if child == 0:  # a Python handler, as a forked worker inherits one: the signal is noted
                signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
                os.write(started, b"1")
                time.sleep(30)
                os._exit(0)
            os.read(ready, 1)  # the child runs: its after-fork hook is done (a signal before it is a known gap)
            sent = time.monotonic()
            os.kill(child, signal.SIGTERM)  # written to the wakeup fd the child inherited
            os.waitpid(child, 0)
            time.sleep(3)  # three resends' time
        outcome("fork", fork_and_stop_the_child)
    """)
    assert cases["fork"].startswith("completed"), cases


FLOWS = """
from prefect import flow, task
import prefect.task_engine as task_engine

@task
def step(i):
    return i

def steps():  # what the run goes on to do if the signal is lost: 10 s of steps
    for i in range(40):
        step(i)
        time.sleep(0.25)

@flow(on_completion=[lambda *_: send(signal.SIGINT)])
def child():
    return step(0)

@flow
def subflow_ends():
    child()
    steps()

create_task_run = task_engine._create_task_run_locally
def signalled_first(*args, **kwargs):
    task_engine._create_task_run_locally = create_task_run
    send(signal.SIGTERM)
    return create_task_run(*args, **kwargs)

@flow
def task_run_created():
    task_engine._create_task_run_locally = signalled_first
    try:
        step(0)
    except Exception:  # a failed step taken in its stride, as Prefect's own ValueError is
        pass
    steps()

@flow
def finalizer():
    Dropped()
    steps()

for work in (subflow_ends, task_run_created, finalizer):
    outcome(work.__name__, work)
"""


@pytest.fixture(scope="module")
def prefect_cases(prefect_harness):
    from prefect.settings import PREFECT_API_URL

    return run(FLOWS, {"PREFECT_API_URL": PREFECT_API_URL.value()})


def test_sigint_as_a_subflow_run_ends_stops_the_run(prefect_cases):
    """Prefect drops a BaseException raised once the subflow run is final."""
    assert stopped_within(prefect_cases["subflow_ends"], "SIGINT", 10), prefect_cases


def test_sigterm_as_a_task_run_is_created_stops_the_run(prefect_cases):
    """Prefect's TerminationSignal becomes ValueError('Task run is not set'), which the flow catches."""
    assert stopped_within(prefect_cases["task_run_created"], "SIGTERM", 10), prefect_cases


def test_sigterm_in_a_finalizer_while_a_flow_runs_stops_the_run(prefect_cases):
    assert stopped_within(prefect_cases["finalizer"], "SIGTERM", 10), prefect_cases
