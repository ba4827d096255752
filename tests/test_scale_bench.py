"""bench/scale.py's parts that need no model: the replicated pairs it builds, its table and
projection from records (written here; nothing is run), and its peak-memory sampler."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from builders import bench_script


@pytest.fixture(scope="module")
def scale():
    return bench_script("scale")


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    """Three real-looking records, one of them without an abstract and one repeated."""
    rows = [{"title": "Naloxone reverses clonidine.",
             "abstract": "Rats were treated. Blood pressure fell. It rose again."},
            {"title": "Lidocaine asystole.", "abstract": "A single bolus of lidocaine stopped the heart."},
            {"title": "No abstract here.", "abstract": ""},
            {"title": "Lidocaine asystole.", "abstract": "A single bolus of lidocaine stopped the heart."}]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows(path: Path) -> list[tuple[str, str]]:
    table = pq.read_table(path)
    assert table.column_names == ["query", "document"]
    return list(zip(table.column("query").to_pylist(), table.column("document").to_pylist(), strict=True))


def test_replicated_pairs_are_distinct_deterministic_and_made_of_the_sources_words(scale, sources, tmp_path):
    src = scale.biomed_pairs(sources)
    assert src == [("Naloxone reverses clonidine.", "Rats were treated. Blood pressure fell. It rose again."),
                   ("Lidocaine asystole.", "A single bolus of lidocaine stopped the heart.")]

    first = _rows(scale.write_pairs(src, 7, tmp_path / "a.parquet", batch=3))
    again = _rows(scale.write_pairs(src, 7, tmp_path / "b.parquet", batch=5))

    assert first == again
    assert len(first) == 7 and len(set(first)) == 7
    assert len({q for q, _ in first}) == len({d for _, d in first}) == 7
    assert first[:2] == src  # copy 0 is the source itself
    assert first[2] == ("Naloxone reverses clonidine. (copy 1)",
                        "Blood pressure fell. It rose again. Rats were treated. (copy 1)")  # rotated by one
    assert first[6] == ("Naloxone reverses clonidine. (copy 3)",
                        "Rats were treated. Blood pressure fell. It rose again. (copy 3)")  # by three: round
    words = {w for q, d in src for w in f"{q} {d}".split()}
    assert {w for q, d in first for w in f"{q} {d}".split()} - words == {"(copy", "1)", "2)", "3)"}


def _record(label: str, step: str, n: int, wall: float, rss: int, status: str = "ok", first: float | None = None):
    """A record as bench/scale.py writes one; a train record (``first``) has its pairs read at 5 s."""
    timing = {"pairs_read_s": 5.0, "first_step_s": first} if first else {}
    return {"label": label, "commit": "abc1234", "step": step, "n": n, "status": status, "wall_s": wall, "cpu_s": wall,
            "peak_rss_mib": rss, "peak_process_mib": rss, **timing}


def test_ratios_and_the_projection_come_from_the_sizes_that_ended_ok(scale):
    records = [_record("current", "vocab", 10_000, 100.0, 1000), _record("current", "vocab", 100_000, 400.0, 1500),
               _record("current", "vocab", 1_000_000, 3_100.0, 3300),
               _record("current", "train", 10_000, 50.0, 2000, first=20.0),
               _record("current", "train", 100_000, 80.0, 2000, first=30.0),
               _record("current", "train", 1_000_000, 9.0, 16_000, status="killed at 16.0 GB (over --max-rss-gb)")]

    ratios = {(r["step"], r["to"]): r for r in scale.ratios(records)}
    assert set(ratios) == {("vocab", 100_000), ("vocab", 1_000_000), ("train", 100_000)}
    assert ratios["vocab", 100_000]["rss"] == pytest.approx(1.5)
    assert ratios["vocab", 100_000]["wall_per_pair"] == pytest.approx(0.4)
    assert ratios["vocab", 1_000_000]["wall_per_pair"] == pytest.approx(0.775)

    proj = {p["step"]: p for p in scale.projection(records)}
    # vocab: 3 s per 1k pairs and 2 MiB per 1k pairs above 100k; train: flat memory, 1 s per 3k pairs
    assert proj["vocab"]["from"] == (100_000, 1_000_000)
    assert proj["vocab"]["wall_s"] == pytest.approx(3_100 + 3 * 19_000)
    assert proj["vocab"]["peak_rss_mib"] == pytest.approx(3300 + 2 * 19_000)
    assert proj["train"]["from"] == (10_000, 100_000)
    assert proj["train"]["wall_s"] == pytest.approx(80 + 30 / 90_000 * 19_900_000)
    assert proj["train"]["peak_rss_mib"] == pytest.approx(2000)

    report = scale.report(records)
    assert "| current abc1234 | train | 1,000,000 | killed at 16.0 GB (over --max-rss-gb) |" in report
    assert "| current abc1234 | train | 10,000 | ok | 50.0 | 50.0 | 2,000 | 2,000 | 5.00 | 5.0 | 20.0 |" in report
    assert "Current against ref" not in report


def test_current_against_ref_is_a_ratio_only_where_both_ended_ok(scale):
    records = [_record("current", "vocab", 10_000, 50.0, 1000), _record("ref", "vocab", 10_000, 100.0, 4000),
               _record("current", "vocab", 100_000, 60.0, 1100),
               _record("ref", "vocab", 100_000, 300.0, 16_000, status="killed by SIGKILL (the OOM killer?)")]

    rows = {v["n"]: v for v in scale.versus(records)}

    assert rows[10_000]["rss"] == pytest.approx(0.25) and rows[10_000]["wall"] == pytest.approx(0.5)
    assert rows[100_000]["rss"] is None and rows[100_000]["wall"] is None
    assert "| vocab | 100,000 | killed by SIGKILL (the OOM killer?), 16,000 MiB | ok, 1,100 MiB | – | – |" \
        in scale.report(records)


def test_an_exit_code_names_how_a_step_ended(scale):
    assert scale.status(0) == "ok"
    assert scale.status(-9) == scale.status(137) == "killed by SIGKILL (the OOM killer?)"
    assert scale.status(-15) == "killed by signal 15"
    assert scale.status(2) == "failed (exit 2)"


def test_sizes_read_with_suffixes(scale):
    assert [scale.parse_size(s) for s in ("10k", "1M", "2.5k", "20000", "1_000")] == [10_000, 1_000_000, 2_500,
                                                                                      20_000, 1_000]


def test_the_sampler_sees_a_child_processs_memory_and_the_first_marker(scale, tmp_path):
    code = ("import subprocess, sys, time; print('loading', flush=True); "
            "child = subprocess.Popen([sys.executable, '-c', "
            "'import time; b = bytes(1) * (150 * 2**20); time.sleep(1.5)']); "
            "time.sleep(0.3); print('stage x step 1/3: loss 1.0', flush=True); child.wait(); sys.exit(3)")

    result = scale.measure([sys.executable, "-c", code], tmp_path, {}, tmp_path / "log.txt", scale.TRAIN_MARKERS,
                           interval=0.1)

    assert result["exit_code"] == 3 and result["status"] == "failed (exit 3)"
    assert result["peak_rss_mib"] >= 150 + 5  # the child's bytearray and both interpreters
    assert result["peak_process_mib"] >= 150
    assert result["pairs_read_s"] is None  # no such line
    assert 0.2 < result["first_step_s"] < result["wall_s"]
    assert result["cpu_s"] >= 0.0 and result["wall_s"] >= 1.5
    assert "stage x step 1/3" in (tmp_path / "log.txt").read_text()


def test_a_step_over_the_memory_limit_is_killed_and_recorded_so(scale, tmp_path):
    code = "import time; b = bytes(1) * (300 * 2**20); time.sleep(30)"

    result = scale.measure([sys.executable, "-c", code], tmp_path, {}, tmp_path / "log.txt", limit=200 * 2**20,
                           interval=0.1)

    assert result["status"].startswith("killed at 0.") and result["status"].endswith("(over --max-rss-gb)")
    assert result["exit_code"] == -9
    assert result["wall_s"] < 20
