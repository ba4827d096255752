"""Any domain from the user's own pairs, through the whole pipeline: cached on their content,
rerun from the filter on when they change, and the shipped example end to end."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prefect.settings import get_current_settings

from flows.filter import filter_flow
from flows.own_pairs import own_pairs_flow
from flows.pipeline import mosaic_pipeline
from flows.rebuild import rebuild
from tasks.config_file import load_pipeline_config
from mosaic_core.config import OFFLINE_MODEL, FilterConfig, OwnPairsConfig
from storage.layout import DataLayout
from storage.pairs_io import CorpusError

pytestmark = pytest.mark.usefixtures("prefect_harness")
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "python-docs" / "pipeline.yaml"
TOPICS = ["termination", "liability", "confidentiality", "payment", "warranty", "assignment", "governing law",
          "force majeure", "indemnity", "notices"]


def clauses(path: Path, n: int = 30, extra: str = "") -> Path:
    path.write_text("".join(json.dumps({
        "heading": f"{TOPICS[i % 10]} {i}{extra}",
        "clause": f"This clause on {TOPICS[i % 10]} binds both parties from the effective date; clause {i} "
                  f"sets out what each party owes the other under it.", "n": i}) + "\n" for i in range(n)))
    return path


def mtimes(root: Path, dataset: str) -> dict[str, int]:
    return {p.parent.name: p.stat().st_mtime_ns for p in (root / dataset).glob("source=*/part.parquet")}


def test_unchanged_pairs_rerun_nothing_and_changed_ones_rerun_from_the_filter(tmp_path):
    source, root = clauses(tmp_path / "clauses.jsonl"), tmp_path / "root"
    cfg = OwnPairsConfig(path=str(source), query_column="heading", document_column="clause", partition_rows=20)
    filter_cfg = FilterConfig(model=OFFLINE_MODEL, k=5)
    manifests = own_pairs_flow(cfg, str(root))
    assert [(m.partition, m.records_in, m.kept) for m in manifests] == [("pairs-00000", 20, 20),
                                                                        ("pairs-00001", 10, 10)]
    filter_flow(str(root), filter_cfg, str(root))
    pairs, filtered = mtimes(root, "citations"), mtimes(root, "filtered")

    own_pairs_flow(cfg, str(root))
    filter_flow(str(root), filter_cfg, str(root))
    assert (mtimes(root, "citations"), mtimes(root, "filtered")) == (pairs, filtered)  # all from cache

    clauses(source, n=25, extra=" (amended)")  # changed, and shorter: one partition fewer rows
    manifests = own_pairs_flow(cfg, str(root))
    filter_flow(str(root), filter_cfg, str(root))
    assert [m.records_in for m in manifests] == [20, 5]
    assert all(mtimes(root, "citations")[p] > pairs[p] for p in pairs)
    assert all(mtimes(root, "filtered")[p] > filtered[p] for p in filtered)


def test_a_source_whose_pairs_all_fail_the_rules_says_why(tmp_path):
    source = clauses(tmp_path / "clauses.jsonl", n=5)
    with source.open("a") as fh:
        fh.write(json.dumps({"heading": "", "clause": "x"}) + "\nnot json\n")
    cfg = OwnPairsConfig(path=str(source), query_column="heading", document_column="clause",
                         min_document_words=1000)
    with pytest.raises(CorpusError, match=r"no pairs left after the filters \(7 rows read; dropped: "
                                          r"long_document|short_document 5, missing_query 1, invalid_json 1"):
        own_pairs_flow(cfg, str(tmp_path / "root"))


def test_a_misspelt_column_is_one_short_error_listing_the_columns(tmp_path):
    source = clauses(tmp_path / "clauses.jsonl", n=3)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    done = subprocess.run([sys.executable, "-m", "cli", "run", "--pairs", str(source), "--query-column", "heading",
                           "--document-column", "clase", "--base-model", OFFLINE_MODEL, "-d", str(tmp_path / "r")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**env, "COLUMNS": "300", "PREFECT_HOME": str(tmp_path / "home")})
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "no column 'clase'; it has ['clause', 'heading', 'n']" in out and len(out.strip().splitlines()) <= 3, out
    assert not DataLayout(tmp_path / "r").catalog_path.exists()


@pytest.mark.timeout(3600)  # a hang guard: alone well under 30 min on 2 cores; past it with two other jobs on them
def test_the_python_docs_example_runs_end_to_end_and_a_rerun_is_cached(tmp_path):
    cfg = load_pipeline_config(str(EXAMPLE))
    assert Path(cfg.source.path) == EXAMPLE.parent / "pairs.jsonl"  # relative to the config file
    root = tmp_path / "python-docs"
    result = mosaic_pipeline(cfg, str(root))

    by_model = {m: {s["task"]: s["value"] for s in ss} for m, ss in result["scores"].items()}
    final = cfg.train.stages[-1].name
    assert set(by_model) >= {"base", "stage1", final} and "heldout" in by_model[final]
    report = (root / "report" / "report.md").read_text()
    assert "| rows read | 429 |" in report and "pairs after the length and language filters" in report
    assert cfg.domain in (Path(result["final_model"]) / "README.md").read_text()
    weights = {p: p.stat().st_mtime_ns for p in (root / "models").glob("*/model.safetensors")}
    predictions = {p: p.stat().st_mtime_ns for p in (root / "report" / "predictions").rglob("*") if p.is_file()}
    assert weights and predictions
    # Every cache record lives under the data root: a rerun from a fresh Prefect home is cached whole.
    shutil.rmtree(get_current_settings().results.local_storage_path, ignore_errors=True)
    again = rebuild(config_file=str(EXAMPLE), data_root=str(root))  # a scheduled tick, the data unchanged
    assert again["rebuilt"] and again["final_model"] == result["final_model"]
    assert {p: p.stat().st_mtime_ns for p in weights} == weights  # nothing retrained
    assert {p: p.stat().st_mtime_ns for p in predictions} == predictions  # nothing scored again
    assert {m: again["scores"][m] for m in result["scores"]} == result["scores"]
