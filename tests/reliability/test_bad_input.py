"""Bad input at the edge: one clear line that says what to do, exit code 2, no traceback, nothing
written. Each probe runs the real `mosaic` entry point in a subprocess."""

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mosaic(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "300", **(env or {})}, timeout=300)


def one_clear_line(done: subprocess.CompletedProcess, *phrases: str) -> None:
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "Traceback" not in out, out
    for phrase in phrases:
        assert phrase in out, out


@pytest.fixture
def pairs(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"title": f"title {i}", "abstract": f"abstract {i}"}) + "\n" for i in range(8)))
    return path


def test_an_unknown_option_is_a_usage_error(tmp_path):
    one_clear_line(mosaic("filter", "--input", str(tmp_path), "--no-such-option"), "No such option: --no-such-option",
                   "filter --help")


def test_a_pairs_path_that_does_not_exist(tmp_path):
    one_clear_line(mosaic("train", "--model", "offline:all-MiniLM-L6-v2", "--pairs", str(tmp_path / "nope.jsonl"),
                          "--out", str(tmp_path / "out")), "does not exist")
    assert not (tmp_path / "out").exists()


def test_wrong_columns_name_the_file_and_the_columns_it_has(pairs, tmp_path):
    one_clear_line(mosaic("filter", "--input", str(pairs), "-d", str(tmp_path / "root"), "--model",
                          "offline:all-MiniLM-L6-v2"), "no column(s) ['query', 'document']", "'abstract', 'title'",
                   "--query-column")


def test_a_model_path_that_does_not_exist_leaves_no_output_folder(pairs, tmp_path):
    one_clear_line(mosaic("vocab", "--corpus", str(pairs), "--columns", "title", "--out", str(tmp_path / "out"),
                          "--base-model", str(tmp_path / "no-model")), "no such model directory",
                   "offline:all-MiniLM-L6-v2")
    assert not (tmp_path / "out").exists()


def test_an_empty_directory_is_not_a_model(pairs, tmp_path):
    (tmp_path / "empty").mkdir()
    one_clear_line(mosaic("train", "--model", str(tmp_path / "empty"), "--pairs", str(pairs), "--query-column",
                          "title", "--document-column", "abstract", "--out", str(tmp_path / "out")),
                   "not a model (no config.json)")


def test_a_hub_id_offline_points_at_the_offline_model(pairs, tmp_path):
    one_clear_line(mosaic("filter", "--input", str(pairs), "--query-column", "title", "--document-column", "abstract",
                          "-d", str(tmp_path / "root"), "--model", "thenlper/gte-base",
                          env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}),
                   "not in the local Hugging Face cache", "offline:all-MiniLM-L6-v2")


def test_a_data_root_that_is_a_file_and_a_yaml_that_is_not_a_mapping(pairs, tmp_path):
    (tmp_path / "afile").write_text("x")
    done = mosaic("filter", "--input", str(pairs), "--query-column", "title", "--document-column", "abstract",
                  "-d", str(tmp_path / "afile"), "--model", "offline:all-MiniLM-L6-v2")
    assert done.returncode == 2 and "is a file" in done.stdout + done.stderr
    (tmp_path / "list.yaml").write_text("- base_model\n")
    done = mosaic("run", "--config", str(tmp_path / "list.yaml"), "-d", str(tmp_path / "root"))
    assert done.returncode == 2 and "top level must be a mapping" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_debug_shows_the_traceback(tmp_path):
    done = mosaic("--debug", "train", "--model", "offline:all-MiniLM-L6-v2", "--pairs",
                  str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "out"))
    assert done.returncode != 0 and "Traceback" in done.stderr and "CorpusError" in done.stderr


def test_non_string_cells_in_a_parquet_pairs_file_are_counted_not_fatal(tmp_path):
    from storage.pairs_io import list_pair_partitions, read_pair_partition, read_pairs

    path = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"query": [1, 2, None, 4], "document": ["a b c", "d e f", "g h i", None]}), path)
    pairs, skipped = read_pairs(str(path))
    assert pairs == [] and skipped == 4
    (part,) = list_pair_partitions(str(path))
    rows = read_pair_partition(part)
    assert rows.queries == [] and rows.bad == {"invalid_json": 0, "missing_query": 1, "missing_document": 0,
                                               "non_text_query": 3}
    pq.write_table(pa.table({"query": ["a title here", "second title"], "document": [["a", "list"], None]}), path)
    (part,) = list_pair_partitions(str(path))
    assert read_pair_partition(part).bad == {"invalid_json": 0, "missing_query": 0, "missing_document": 1,
                                             "non_text_document": 1}


def test_a_missing_islamic_source_file_stops_before_any_work(tmp_path):
    config = tmp_path / "islamic.yaml"
    config.write_text(f"base_model: offline:all-MiniLM-L6-v2\nsource:\n  kind: islamic\n"
                      f"  quran: {tmp_path / 'nope.txt'}\n  tafsir: {tmp_path / 'tafsir.jsonl'}\n"
                      "filter:\n  model: offline:all-MiniLM-L6-v2\n")
    one_clear_line(mosaic("run", "--config", str(config), "-d", str(tmp_path / "root")), "source.quran",
                   "nope.txt", "relative to the directory you run mosaic from")
    assert not (tmp_path / "root" / "models").exists()
