"""A real `prefect server` on 127.0.0.1: each data root's served `rebuild` deployment is its own
(two serves side by side, each scheduled, one stopped, the other unchanged); a served deployment triggered
through the API runs to completion with its task runs and artifacts visible; the work-pool
route of the tutorial exits 0 at every command and a worker completes a triggered rebuild."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from builders import pubmed_xml, tiny_bert, tiny_pipeline_yaml, varied_articles, write_xml

from deployments import DEFAULT_CRON

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, seconds: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"{url} not up after {seconds}s:\n{log.read_text()[-3000:]}")


def _post(url: str, body: dict) -> list[dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    """(URL, environment of a client of it) of one real server for this module's tests."""
    home = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(home / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_API_URL": f"http://127.0.0.1:{port}/api", "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2"}
    log = home / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for(f"http://127.0.0.1:{port}/api/health", 180, proc, log)
        yield f"http://127.0.0.1:{port}", env
    finally:
        proc.terminate()
        proc.wait(30)


def _serve(root: Path, log: Path, env: dict, *args: str) -> subprocess.Popen:
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        return subprocess.Popen([str(BIN / "mosaic"), "serve", "-d", str(root), *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT, cwd=root.parent)


def _polled(client, name: str, serve: subprocess.Popen, log: Path, seconds: float = 180):
    """Deployment ``rebuild/name`` once its serve has polled it."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            deployment = client.read_deployment_by_name(f"rebuild/{name}")
            if deployment.last_polled is not None:
                return deployment
        except Exception:
            pass
        if time.monotonic() > deadline or serve.poll() is not None:
            raise RuntimeError(log.read_text()[-3000:])
        time.sleep(1)


def _scheduled(client, deployment) -> list:
    """The runs the server's scheduler has created for ``deployment`` and that wait for their time."""
    from prefect.client.schemas.filters import FlowRunFilter
    from prefect.client.schemas.sorting import FlowRunSort

    return client.read_flow_runs(limit=50, sort=FlowRunSort.EXPECTED_START_TIME_ASC, flow_run_filter=FlowRunFilter(
        deployment_id={"any_": [deployment.id]}, state={"type": {"any_": ["SCHEDULED"]}}))


def test_two_data_roots_are_served_side_by_side_and_one_stops_alone(tmp_path, prefect_server):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from deployments import deployment_name

    url, env = prefect_server
    roots = {key: tmp_path / key / "mosaic-data" for key in ("a", "b")}  # one folder name, two paths
    names = {key: deployment_name(root) for key, root in roots.items()}
    assert names["a"] != names["b"] and all(n.startswith("mosaic-data-") for n in names.values())
    serves = {key: _serve(root, tmp_path / f"serve-{key}.log", env) for key, root in roots.items()}
    try:
        with temporary_settings({PREFECT_API_URL: f"{url}/api"}), get_client(sync_client=True) as client:
            served = {key: _polled(client, names[key], serves[key], tmp_path / f"serve-{key}.log") for key in roots}
            assert {key: d.parameters["data_root"] for key, d in served.items()} == {
                key: str(root) for key, root in roots.items()}
            listed = _ok(str(BIN / "prefect"), "deployment", "ls", env={**env, "COLUMNS": "200"}, cwd=tmp_path)
            assert all(name in listed for name in names.values())
            deadline = time.monotonic() + 120  # the scheduler (every 2 s here) makes each its 03:00 runs
            while not all(_scheduled(client, d) for d in served.values()):
                assert time.monotonic() < deadline, "the server's scheduler created no run of a served deployment"
                time.sleep(2)
            again = subprocess.run([str(BIN / "mosaic"), "serve", "-d", str(roots["a"])], env=env,
                                   capture_output=True, text=True, timeout=120)
            assert again.returncode == 3, again.stderr
            assert f"in use by `mosaic serve (deployment rebuild/{names['a']})`" in " ".join(again.stderr.split())
            taken = subprocess.run([str(BIN / "mosaic"), "serve", "-d", str(tmp_path / "c"), "--name", names["b"]],
                                   env=env, capture_output=True, text=True, timeout=120)
            assert taken.returncode == 2, taken.stderr
            assert f"is served for data root {roots['b']}" in " ".join(taken.stderr.split())

            serves["a"].terminate()
            assert serves["a"].wait(60) == 0
            stopped, other = (client.read_deployment_by_name(f"rebuild/{names[key]}") for key in ("a", "b"))
            assert stopped.paused and not other.paused
            assert other.parameters == served["b"].parameters
            assert [s.schedule.cron for s in other.schedules] == [DEFAULT_CRON] and other.schedules[0].active
            assert _scheduled(client, other)  # its next 03:00 runs still wait
            assert serves["b"].poll() is None
    finally:
        for serve in serves.values():
            serve.terminate()
            serve.wait(30)


def test_a_served_rebuild_runs_through_the_api(tmp_path, prefect_server):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.sorting import FlowRunSort, TaskRunSort
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from deployments import deployment_name

    url, env = prefect_server
    src = tmp_path / "snapshot"
    write_xml(src / "pubmed26n0001.xml.gz", pubmed_xml(varied_articles(1, 16)))
    config = tiny_pipeline_yaml(tmp_path / "pipeline.yaml", str(src), str(tiny_bert(tmp_path / "base")))
    log = tmp_path / "serve.log"
    serve = _serve(tmp_path / "root", log, env, "--config", str(config), "--cron", "")
    name = deployment_name(tmp_path / "root")
    try:
        with temporary_settings({PREFECT_API_URL: f"{url}/api"}), get_client(sync_client=True) as client:
            deployment = _polled(client, name, serve, log)
            assert set(deployment.parameters) == {"config_file", "data_root", "force", "full"}
            run = run_deployment(f"rebuild/{name}", timeout=420, poll_interval=2)
            assert run.state.is_completed(), (run.state, log.read_text()[-3000:])
            tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])), limit=200,
                                          sort=TaskRunSort.EXPECTED_START_TIME_ASC)
            names = {t.name.rsplit("-", 1)[0] for t in tasks}
            assert {"list-snapshot", "snapshot-changes", "record-snapshot"} <= names
            assert all(t.state.is_completed() for t in tasks)
            children = client.read_flow_runs(limit=200, sort=FlowRunSort.EXPECTED_START_TIME_ASC,
                                             flow_run_filter=FlowRunFilter(parent_flow_run_id={"any_": [run.id]}))
            assert children and all(c.state.is_completed() for c in children)
            keys = {a["key"] for a in _post(f"{url}/api/artifacts/filter", {"limit": 200, "offset": 0})}
            assert {"rebuild", "pipeline-summary", "evaluation-report", "ingest-files"} <= keys
            runs = {str(c.id) for c in children} | {str(g.id) for g in client.read_flow_runs(
                limit=200, sort=FlowRunSort.EXPECTED_START_TIME_ASC,
                flow_run_filter=FlowRunFilter(parent_flow_run_id={"any_": [c.id for c in children]}))}
            summaries = {a["key"]: a["data"] for a in _post(f"{url}/api/artifacts/filter", {
                "limit": 200, "offset": 0, "artifacts": {"key": {"any_": ["rebuild", "pipeline-summary"]}}})
                if a["flow_run_id"] in runs | {str(run.id)}}
            assert summaries.keys() == {"rebuild", "pipeline-summary"}
            assert all("published model" in text and "Final model" not in text for text in summaries.values())
            progress = [a["data"] for a in _post(f"{url}/api/artifacts/filter", {
                "limit": 200, "offset": 0, "artifacts": {"key": {"any_": ["ingest-progress"]}}})
                if a["flow_run_id"] in runs]
            assert progress == [100.0]  # counted by the flow, not by a bar that is off without a terminal
            said = log.read_text()
            assert "Beginning subflow run" in said and "\r" not in said and "it/s]" not in said  # no bar fragments
            with urllib.request.urlopen(url + "/", timeout=10) as ui:  # the UI is served on loopback
                assert ui.status == 200 and b"<html" in ui.read().lower()

    finally:
        serve.terminate()
        serve.wait(30)


@pytest.mark.slow
def test_a_killed_serve_leaves_no_run_behind_holding_the_data_root(tmp_path, prefect_server):
    """`kill -9` of `mosaic serve` while its run trains: the run's process stops within seconds,
    its flow run ends (not Running), and the data root's lock is free for the next run."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from deployments import deployment_name
    from storage.lock import holder, root_lock

    url, env = prefect_server
    src, root = tmp_path / "snapshot", tmp_path / "root"
    write_xml(src / "pubmed26n0001.xml.gz", pubmed_xml(varied_articles(1, 16)))
    long_stage = {"name": "joint", "kind": "joint", "batch_size": 4, "max_steps": 100_000, "log_every": 1,
                  "checkpoint_every": 1000}
    config = tiny_pipeline_yaml(tmp_path / "pipeline.yaml", str(src), str(tiny_bert(tmp_path / "base")),
                                train={"heldout_pairs": 4, "stages": [long_stage]})
    log = tmp_path / "serve.log"
    serve = _serve(root, log, env, "--config", str(config), "--cron", "")
    try:
        with temporary_settings({PREFECT_API_URL: f"{url}/api"}), get_client(sync_client=True) as client:
            name = deployment_name(root)
            _polled(client, name, serve, log)
            run = run_deployment(f"rebuild/{name}", timeout=0)
            deadline = time.monotonic() + 600
            while "stage joint step 3/" not in log.read_text():  # training
                assert time.monotonic() < deadline and serve.poll() is None, log.read_text()[-3000:]
                time.sleep(1)
            engine = psutil.Process(holder(root)["pid"])
            assert engine.ppid() == serve.pid  # the run's own process, started by the serve
            serve.kill()
            serve.wait(30)
            engine.wait(timeout=60)  # psutil.TimeoutExpired if it outlived its serve by a minute
            assert holder(root) == {}  # released by the stopped run, not left to a takeover
            with root_lock(root, "the next run"):
                pass
            ended = client.read_flow_run(run.id).state
            assert ended.is_final() and not ended.is_completed(), ended
    finally:
        serve.kill()
        serve.wait(30)


def _ok(*command: str, env: dict, cwd: Path) -> str:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_the_work_pool_route_exits_0_and_a_worker_completes_a_triggered_rebuild(tmp_path, prefect_server):
    """The tutorial's commands as they are: create the pool, `mosaic deploy`, a worker, a run."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from deployments import deployment_name

    url, env = prefect_server
    src = tmp_path / "snapshot"
    write_xml(src / "pubmed26n0001.xml.gz", pubmed_xml(varied_articles(1, 16)))
    config = tiny_pipeline_yaml(tmp_path / "pipeline.yaml", "snapshot", str(tiny_bert(tmp_path / "base")))
    name = f"rebuild/{deployment_name(tmp_path / 'root')}"
    _ok(str(BIN / "prefect"), "work-pool", "create", "mosaic-test-pool", "--type", "process", env=env, cwd=tmp_path)
    pools = _ok(str(BIN / "prefect"), "work-pool", "ls", env={**env, "COLUMNS": "200"}, cwd=tmp_path)
    assert "mosaic-test-pool" in pools
    said = _ok(str(BIN / "mosaic"), "deploy", "-d", "root", "--config", str(config), "--pool", "mosaic-test-pool",
               env=env, cwd=tmp_path)  # the source a relative path, read from here as `mosaic run` reads it
    assert f"deployment {name} registered on work pool mosaic-test-pool" in said
    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "mosaic-test-pool"], env=env,
                                  stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        with temporary_settings({PREFECT_API_URL: f"{url}/api"}), get_client(sync_client=True) as client:
            deployment = client.read_deployment_by_name(name)
            assert deployment.work_pool_name == "mosaic-test-pool"
            assert [s.schedule.cron for s in deployment.schedules] == [DEFAULT_CRON]
            assert deployment.parameters["data_root"] == str(tmp_path / "root")
            triggered = _ok(str(BIN / "prefect"), "deployment", "run", name, env=env, cwd=tmp_path)
            run_id = next(line.split()[-1] for line in triggered.splitlines() if "UUID:" in line)
            deadline = time.monotonic() + 600
            while not (run := client.read_flow_run(run_id)).state.is_final():
                assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-3000:]
                time.sleep(3)
            assert run.state.is_completed() and run.state.name == "Completed", (run.state, log.read_text()[-3000:])
            assert (tmp_path / "root" / "state" / "last_snapshot.json").is_file()  # recorded by a whole rebuild
    finally:
        worker.terminate()
        worker.wait(60)


_BROKEN_SERVER = """
import sys, time
import psutil
from flows.server import api_ready, command_api, start_api
with command_api():
    if sys.argv[1] == "wait":
        api_ready()
    else:  # leave once the server has failed, without waiting for it (as a failing flow import does)
        start_api()
        server = psutil.Process().children()[0]
        while server.status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.2)
"""


def _with_broken_server(tmp_path, how: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = f"sqlite+aiosqlite:///{tmp_path}/no/such/dir/prefect.db"
    return subprocess.run([sys.executable, "-c", _BROKEN_SERVER, how], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)


def test_a_temporary_server_that_cannot_start_says_why(tmp_path):
    done = _with_broken_server(tmp_path, "wait")
    assert done.returncode != 0
    assert "the temporary Prefect server exited with" in done.stderr
    assert "unable to open database file" in done.stderr  # the server's own words, not just an exit code


def test_a_command_that_never_used_its_server_prints_nothing_of_it(tmp_path):
    done = _with_broken_server(tmp_path, "leave")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
