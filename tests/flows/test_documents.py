"""A domain with documents but no pairs: a folder of text files becomes pairs (titles and inverse
cloze) and runs through the whole pipeline; a rerun builds nothing again; bad input is reported
before a run starts."""

import json

import pytest
import yaml
from builders import DISEASES, DRUGS, tiny_bert, tiny_pipeline_yaml

from tests.cli.test_early_errors import _mosaic


def write_documents(folder, n: int = 40) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        drug, disease = DRUGS[i % len(DRUGS)], DISEASES[i // len(DRUGS) % len(DISEASES)]
        body = " ".join(f"Sentence {j} says that {drug} changed {disease} in cohort {i} of {40 + j} patients."
                        for j in range(6))
        (folder / f"note-{i:02d}.txt").write_text(f"How {drug} acts on {disease} in cohort {i}\n{body}\n")


@pytest.mark.usefixtures("prefect_harness")
def test_a_folder_of_text_files_runs_end_to_end_and_a_rerun_builds_nothing(tmp_path):
    from flows.rebuild import rebuild

    write_documents(tmp_path / "notes")
    base = str(tiny_bert(tmp_path / "base"))
    config = tiny_pipeline_yaml(tmp_path / "pipeline.yaml", "", base)
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "source": {
        "kind": "documents", "path": "notes", "title_from_first_line": True, "passage_words": 40,
        "min_passage_words": 10}}))  # relative to the config's folder
    root = tmp_path / "root"
    first = rebuild(str(config), str(root))
    record = json.loads((root / "documents" / "pairs.json").read_text())
    assert record["documents"]["documents"] == 40 and set(record["pairs"]) == {"title", "ict"}
    assert record["pairs"]["title"] == 40  # one title per document, with its first passage
    built = [json.loads(line) for line in (root / "documents" / "pairs.jsonl").read_text().splitlines()]
    assert all(p["query"].split()[0] == "How" for p in built if p["builder"] == "title")
    ict = [p for p in built if p["builder"] == "ict"]
    assert ict and all(p["query"].startswith("Sentence") for p in ict)
    assert first["pairs"] == len(built)
    report = (root / "report" / "report.md").read_text()
    assert "pairs built from the documents' passages" in report and "finding a held-out passage" in report
    written = (root / "documents" / "pairs.jsonl").stat().st_mtime_ns

    again = rebuild(str(config), str(root))
    assert (root / "documents" / "pairs.jsonl").stat().st_mtime_ns == written  # from cache
    assert again["pairs"] == first["pairs"]

    (root / "documents" / "pairs.jsonl").unlink()  # a lost output: built again, not taken from the cached record
    healed = rebuild(str(config), str(root))
    assert [json.loads(line) for line in (root / "documents" / "pairs.jsonl").read_text().splitlines()] == built
    assert healed["pairs"] == first["pairs"]


def test_documents_that_are_not_there_are_reported_before_any_server_starts(tmp_path):
    outcome, said = _mosaic("run", "--documents", str(tmp_path / "nowhere"), "--base-model",
                            "offline:all-MiniLM-L6-v2", "--data-root", str(tmp_path / "root"))
    assert outcome == {"code": 2, "server": False, "torch": False}
    assert "nowhere" in said
    rows = tmp_path / "docs.jsonl"
    rows.write_text(json.dumps({"body": "A document whose text is in another column."}) + "\n")
    outcome, said = _mosaic("run", "--documents", str(rows), "--base-model", "offline:all-MiniLM-L6-v2",
                            "--data-root", str(tmp_path / "root"))
    assert outcome["code"] == 2 and "no column 'text'" in said and "['body']" in said


def test_a_documents_path_in_a_config_is_read_from_the_config_folder(tmp_path):
    from tasks.config_file import load_pipeline_config

    config = tmp_path / "conf" / "run.yaml"
    config.parent.mkdir()
    config.write_text(yaml.safe_dump({"source": {"kind": "documents", "path": "notes/a.txt"}}))
    # not there yet, and shaped like OWNER/NAME: still a file beside the config, never a hub dataset
    assert load_pipeline_config(str(config)).source.path == str(tmp_path / "conf" / "notes" / "a.txt")
