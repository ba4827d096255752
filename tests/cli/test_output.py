"""What a command prints reads the same in a file or a CI log as on a terminal: no table cell and
no path is broken over lines at 80 columns, and no progress bar redraws itself into fragments."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from builders import pubmed_xml, tiny_bert, tiny_pipeline_yaml, varied_articles, write_xml
from rich.table import Table

from cli.common import out_console

REPO = Path(__file__).resolve().parents[2]


def test_tables_and_paths_are_not_wrapped_without_a_terminal(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    table = Table(title="Training stages")
    cells = {"stage": "contrastive", "steps": "30", "pairs": "787", "loss": "0.0884", "mlm": "3.0734",
             "held-out ndcg@10": "0.8865", "held-out mrr": "0.8333", "held-out recall@1": "0.6875",
             "minutes": "0.4", "resumed from": "–", "model": "/tmp/demo-docs/models/2-contrastive"}
    for name in cells:
        table.add_column(name, overflow="fold")
    table.add_row(*cells.values())
    path = "/tmp/demo-docs/models/published/3b0396f2-ed4f-4a9b-852c-b465f980b87b/and/a/long/tail/of/folders"
    console = out_console()
    console.print(table)
    console.print(f"published model: {path}")
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "contrastive" in line)
    assert all(value in row for value in cells.values())  # the whole row on one line, no value split
    assert all(name in out for name in cells)
    assert f"published model: {path}" in out.splitlines()


@pytest.mark.slow
def test_a_run_sent_to_a_file_has_its_log_lines_and_no_bar_fragments(tmp_path):
    write_xml(tmp_path / "snapshot" / "pubmed26n0001.xml.gz", pubmed_xml(varied_articles(1, 16)))
    config = tiny_pipeline_yaml(tmp_path / "pipeline.yaml", str(tmp_path / "snapshot"),
                                str(tiny_bert(tmp_path / "base")))
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-m", "cli", "run", "--config", str(config), "-d", str(tmp_path / "r")],
                              stdout=out, stderr=subprocess.STDOUT, cwd=REPO, timeout=900,
                              env={**env, "PREFECT_HOME": str(tmp_path / "home")})
    said = log.read_text()
    assert done.returncode == 0, said[-3000:]
    assert "stage joint step 2/2" in said and "filter: kept" in said  # the run's own progress and results
    assert "\r" not in said and "it/s]" not in said and "Loading weights" not in said, said
