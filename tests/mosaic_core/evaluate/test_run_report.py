import json
import shutil
import subprocess

import pytest

from mosaic_core.evaluate.run_report import RunStory, render
from mosaic_core.evaluate.scoring import TaskScore

SCORES = {"base": [TaskScore("heldout", "ndcg_at_10", 0.80, 10, {}, {"q1": 0.7, "q2": 0.9}),
                   TaskScore("invented-terms", "ndcg_at_10", 0.24, 48, {}, {"q1": 0.2, "q2": 0.3})],
          "contrastive": [TaskScore("heldout", "ndcg_at_10", 0.83, 10, {}, {"q1": 0.8, "q2": 0.86}),
                          TaskScore("invented-terms", "ndcg_at_10", 0.61, 48, {}, {"q1": 0.5, "q2": 0.7})]}


@pytest.fixture
def report(tmp_path):
    log = tmp_path / "stage"
    log.mkdir()
    (log / "train_log.jsonl").write_text("".join(json.dumps({"step": s, "total": 1 / s, "contrastive": 1 / s}) + "\n"
                                                 for s in (10, 20, 30)))
    story = RunStory("contrastive", "base", SCORES,
                     decision={"published": True, "published_path": "/root/models/published/r1", "previous": None,
                               "message": "published: contrastive is not worse than base on heldout, invented-terms"},
                     funnel=[("citations parsed", 1250, "3 files"), ("kept by the filter", 900, "inconsistent 300")],
                     heldout={"pairs": 66, "added": 3, "gone": 1, "previous": 64, "validation": 64,
                              "since": "2026-11-28T02:00:00+00:00"},
                     vocab={"tokens_added": 30, "candidates": 519, "min_count": 5, "fertility_before": 1.3,
                            "fertility_after": 1.05, "examples": [{"token": "zorvatide"}],
                            "drift": {"mean_cos": 0.97, "p5_cos": 0.9}},
                     stages=[{"stage": "contrastive", "out_dir": str(log), "best_step": 20,
                              "evals": [{"step": 10, "ndcg@10": 0.9}, {"step": 20, "ndcg@10": 0.95}]}],
                     task_words={"invented-terms": "finding documents about an invented drug from what it does"})
    return render(story, tmp_path / "report")


def test_the_report_leads_with_the_verdict_in_words_and_a_delta_column(report):
    md = report["markdown"].read_text()
    lead = md.split("## Evaluation")[0]
    assert "**invented-terms** — finding documents about an invented drug from what it does: the adapted model " \
           "scores **61.0**, the base model 24.0 (+37.0; 95 % interval +30.0 to +40.0 over 2 queries): better " \
           "than the base." in lead
    # q1 +0.1, q2 −0.04: an interval that holds 0 says so
    assert "(+3.0; 95 % interval -4.0 to +10.0 over 2 queries): above the base by less than these queries can " \
           "tell from no change." in lead
    assert "| contrastive | invented-terms | +35.00 | [+30.00, +40.00] | 2 of 2 |" in md
    assert "**Publish gate:** published: contrastive is not worse" in lead
    assert "| **contrastive** | 83.00 | +3.00 | 61.00 | +37.00 |" in md
    assert "| citations parsed | 1,250 | 3 files |" in md and "zorvatide" in md
    assert "66 test pairs, 64 at the data root's last run (2026-11-28T02:00:00+00:00): 3 added (new pairs below " \
           "the test set's content-hash threshold), 1 gone (their citation deleted or revised)." in md
    assert json.loads((report["html"].parent / "results.json").read_text())["heldout"]["added"] == 3
    assert (report["html"].parent / "curve-contrastive.png").is_file()
    html = report["html"].read_text()
    assert "<table>" in html and 'src="data:image/png;base64,' in html and "src=\"curve" not in html


def test_the_html_renders_in_a_real_headless_browser(report, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no Chromium installed (apt-get install chromium)")
    shot = tmp_path / "shot.png"
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,2400",
                           f"--screenshot={shot}", report["html"].as_uri()], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.stat().st_size > 20_000  # a rendered page with tables and charts, not a blank one
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile2'}",
                          "--dump-dom", report["html"].as_uri()], capture_output=True, text=True, timeout=120)
    assert "MOSAIC run report" in dom.stdout and dom.stdout.count("<img") >= 3
