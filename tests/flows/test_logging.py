"""The method's INFO records reach the console and the Prefect API (the UI's run logs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import flows  # what the CLI, `mosaic serve` and a worker's entrypoint import first
import logging
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect.runtime import flow_run

@flow
def emit():
    logging.getLogger("mosaic_core.train").info("stage x step 10/20: loss 1.0")
    return flow_run.id

run_id = emit()
for handler in logging.getLogger("mosaic_core").handlers:
    handler.flush()
with get_client(sync_client=True) as client:
    logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])), limit=200, offset=0)
print("API:", [(log.name, log.message) for log in logs if "step 10/20" in log.message])
"""


def test_package_info_records_reach_the_console_and_the_run_logs(tmp_path):
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PYTHONPATH": str(Path(__file__).parents[2])}
    env.pop("PREFECT_LOGGING_EXTRA_LOGGERS", None)
    env.pop("PREFECT_API_URL", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "INFO    | mosaic_core.train - stage x step 10/20: loss 1.0" in out
    assert "API: [('mosaic_core.train', 'stage x step 10/20: loss 1.0')]" in done.stdout


def test_links_to_the_temporary_server_are_left_out_of_the_console(tmp_path, monkeypatch, capsys):
    import logging

    from flows.console import full_log

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with full_log("run", tracebacks_on_console=False) as path:
        logging.getLogger("prefect.flow_runs").info("View at http://127.0.0.1:44577/runs/flow-run/fe5ed9b6")
        logging.getLogger("prefect.flow_runs").info("Beginning flow run 'x' for flow 'train'")
    err = capsys.readouterr().err
    assert "Beginning flow run" in err and "View at" not in err
    assert "View at http://127.0.0.1:44577" in path.read_text()  # the full log keeps it
