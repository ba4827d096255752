"""What a command prints reads the same in a file or a CI log as on a terminal: no table cell and
no path is broken over lines at 80 columns."""

from rich.table import Table

from cli.common import out_console


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
