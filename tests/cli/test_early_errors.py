"""A wrong config, a busy data root and a pairs source too small for a run are reported before
the command's Prefect server starts and before torch is imported: in about a second, not after
the flow's imports and the server's start-up. `mosaic serve` reports a wrong config, a source
that does not answer and a data root another serve holds before it loads Prefect's runner."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from storage.lock import root_lock, serve_lock

REPO = Path(__file__).resolve().parents[2]

_COMMAND = """
import json, sys
import flows.server
started = []
flows.server._Temporary.start = lambda self: started.append(True)
from cli.common import main
sys.argv = ["mosaic", *sys.argv[1:]]
try:
    main()
except SystemExit as end:
    code = end.code
print(json.dumps({"code": code, "server": bool(started), "torch": "torch" in sys.modules,
                  "runner": "prefect.runner" in sys.modules}))
"""


def _mosaic(*args: str, env: dict | None = None) -> tuple[dict, str]:
    """({code, server, torch}, stderr) of ``mosaic ARGS``; refused before Prefect's runner loaded."""
    done = subprocess.run([sys.executable, "-c", _COMMAND, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**os.environ, **(env or {})})
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert not outcome.pop("runner"), done.stderr
    return outcome, done.stderr


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_wrong_config_is_reported_before_any_server_starts(tmp_path, command):
    config = tmp_path / "bad.yaml"
    config.write_text("train: {batch_size: -1}\n")
    outcome, said = _mosaic(command, "--config", str(config), "--data-root", str(tmp_path / "root"))
    assert outcome == {"code": 2, "server": False, "torch": False}
    assert "invalid pipeline config" in said and "batch_size" in said


def test_a_busy_root_is_reported_before_any_server_starts(tmp_path):
    root = tmp_path / "root"
    with root_lock(root, "a test holding the root"):
        outcome, said = _mosaic("run", "--data-root", str(root))
    assert outcome == {"code": 3, "server": False, "torch": False}
    assert "in use by `a test holding the root`" in said


@pytest.mark.parametrize(("rows", "expected"), [(1, "no pairs left after the filters (1 rows read; dropped: short"),
                                                (300, "1 distinct usable pairs (299 rows repeat another)")])
def test_too_few_pairs_are_reported_before_any_server_starts(tmp_path, rows, expected):
    pair = {"query": "renal outcomes of the new treatment",
            "document": "We studied the kidneys of patients " * 4 if rows > 1 else "Kidneys."}
    source = tmp_path / "pairs.jsonl"
    source.write_text((json.dumps(pair) + "\n") * rows)
    outcome, said = _mosaic("run", "--pairs", str(source), "--base-model", "offline:all-MiniLM-L6-v2",
                            "--data-root", str(tmp_path / "root"))
    assert outcome == {"code": 2, "server": False, "torch": False}
    assert expected in " ".join(said.split())
    assert not (tmp_path / "root").exists() or not any((tmp_path / "root").rglob("*.parquet"))  # nothing written


def test_a_wrong_set_is_reported_before_any_server_starts(tmp_path):
    outcome, said = _mosaic("run", "--data-root", str(tmp_path / "root"), "--set", "train.heldout_pairs=-3")
    assert outcome == {"code": 2, "server": False, "torch": False}
    assert "--set" in said and "train.heldout_pairs" in " ".join(said.split())
    outcome, said = _mosaic("run", "--data-root", str(tmp_path / "root"), "--set", "train.heldout_pairs")
    assert outcome["code"] == 2 and "expected a dotted field and a value" in said


def test_a_teacher_that_is_no_cross_encoder_is_reported_before_any_server_starts(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"q {i}", "document": f"document {i}"}) + "\n" for i in range(8)))
    teacher = tmp_path / "classifier"
    teacher.mkdir()
    (teacher / "config.json").write_text(json.dumps({"model_type": "bert", "id2label": {"0": "no", "1": "yes"}}))
    outcome, said = _mosaic("train", "--model", "offline:all-MiniLM-L6-v2", "--pairs", str(pairs), "--out",
                            str(tmp_path / "out"), "--set", "objective=margin_mse", "--set", f"teacher={teacher}")
    assert outcome == {"code": 2, "server": False, "torch": False}
    assert "a model of 2 labels; a cross-encoder scoring relevance has one" in said


def test_a_file_that_is_no_glossary_is_reported_before_any_server_starts(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"renal outcome {i} of the new treatment",
                                         "document": f"We studied the kidneys of patient {i} " * 4}) + "\n"
                             for i in range(300)))
    outcome, said = _mosaic("run", "--pairs", str(pairs), "--glossary", str(pairs), "--base-model",
                            "offline:all-MiniLM-L6-v2", "--data-root", str(tmp_path / "root"))
    assert outcome == {"code": 2, "server": False, "torch": False}
    assert f"{pairs}: no column 'term' or 'definition'" in " ".join(said.split())
    outcome, said = _mosaic("run", "--glossary", str(tmp_path / "missing.jsonl"), "--data-root", str(tmp_path / "r"))
    assert outcome == {"code": 2, "server": False, "torch": False}
    assert "missing.jsonl" in said and "no such file" in said


def test_serve_refuses_a_silent_source_a_served_root_and_a_silent_api_first(tmp_path):
    models = "base_model: offline:all-MiniLM-L6-v2\nfilter: {model: offline:all-MiniLM-L6-v2}\n"
    for source, expected in (("http://127.0.0.1:9/pubmed/", "GET http://127.0.0.1:9/pubmed/baseline/"),
                             (str(tmp_path / "no-such-folder"), "neither an existing file/directory")):
        config = tmp_path / "pipeline.yaml"
        config.write_text(f"source: {{kind: pubmed, source: '{source}'}}\n{models}")
        outcome, said = _mosaic("serve", "--config", str(config), "--data-root", str(tmp_path / "root"))
        assert outcome == {"code": 2, "server": False, "torch": False}
        assert "source.source of" in said and expected in " ".join(said.split())
    with serve_lock(tmp_path / "root", "mosaic serve (deployment rebuild/root-1234abcd)"):
        outcome, said = _mosaic("serve", "--data-root", str(tmp_path / "root"))
    assert outcome == {"code": 3, "server": False, "torch": False}
    assert "in use by `mosaic serve (deployment rebuild/root-1234abcd)`" in " ".join(said.split())

    outcome, said = _mosaic("serve", "--data-root", str(tmp_path / "root"),
                            env={"PREFECT_API_URL": "http://127.0.0.1:9/api"})
    assert outcome == {"code": 2, "server": False, "torch": False}
    assert "the Prefect API http://127.0.0.1:9/api does not answer" in " ".join(said.split())
@pytest.mark.parametrize("task", [{"kind": "beir", "name": "scifact", "path": "no-such/scifact"},
                                  {"kind": "sts", "name": "local-sts", "path": "no-such/sts.jsonl"}])
def test_a_missing_evaluation_file_is_reported_before_any_server_starts(tmp_path, task):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"renal outcomes of treatment {i}",
                                         "document": f"We studied the kidneys of patient {i} " * 4}) + "\n"
                             for i in range(300)))
    config = tmp_path / "pipeline.yaml"
    model = "offline:all-MiniLM-L6-v2"
    config.write_text(json.dumps({"base_model": model, "filter": {"model": model},
                                  "source": {"kind": "pairs", "path": str(pairs)}, "eval_tasks": [task]}))
    outcome, said = _mosaic("run", "--config", str(config), "--data-root", str(tmp_path / "root"))
    assert outcome == {"code": 2, "server": False, "torch": False}
    assert f"eval_tasks '{task['name']}' ({task['kind']})" in said and task["path"] in " ".join(said.split())
    assert not (tmp_path / "root").exists() or not any((tmp_path / "root").rglob("*.parquet"))  # nothing written
