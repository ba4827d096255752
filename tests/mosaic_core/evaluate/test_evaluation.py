import json

import numpy as np
import pytest
from builders import tiny_bert
from scipy.stats import spearmanr
from sentence_transformers import SentenceTransformer

from mosaic_core.evaluate.report import write_report
from mosaic_core.evaluate.scoring import (
    TaskUnavailable,
    hub_task,
    retrieval_task,
    score_task,
    sts_task,
    verse_retrieval_data,
)
from mosaic_core.trainer.heldout import retrieval_data
from storage.benchmarks import BenchmarkError, read_beir, read_sts

DOCS = {"d1": "the patient cells were studied", "d2": "a cell of the patient", "d3": "cells with q and a",
        "d4": "the q was in a cell", "d5": "patient with cells in the q", "d6": "and the cells were q"}
QUERIES = {"q1": "patient cells", "q2": "q cell", "q3": "cells and q", "q4": "the patient"}
QRELS = {"q1": {"d1": 1, "d5": 1}, "q2": {"d4": 1}, "q3": {"d3": 2, "d6": 1}, "q4": {"d2": 1, "missing": 1}}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return str(tiny_bert(tmp_path_factory.mktemp("m")))


def beir_folder(root):
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                                               for k, v in DOCS.items()))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in QUERIES.items()))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{s}\n" for q, ds in QRELS.items() for d, s in ds.items()))
    return root


def ndcg10(ranked: list[str], rel: dict[str, int]) -> float:
    dcg = sum(rel.get(d, 0) / np.log2(i + 2) for i, d in enumerate(ranked[:10]))  # trec_eval: linear gain
    ideal = sorted(rel.values(), reverse=True)
    idcg = sum(r / np.log2(i + 2) for i, r in enumerate(ideal[:10]))
    return dcg / idcg


def test_beir_retrieval_matches_an_independent_ndcg(model, tmp_path):
    data = read_beir(beir_folder(tmp_path / "beir"))
    assert data.skipped["judgements_for_unknown_docs"] == 1 and set(data.queries) == set(QUERIES)
    score = score_task(model, retrieval_task("toy", data.corpus, data.queries, data.qrels), tmp_path / "w")
    st = SentenceTransformer(model, device="cpu")
    ids = list(DOCS)
    d = st.encode([DOCS[i] for i in ids], normalize_embeddings=True)
    expected = {}
    for q, text in QUERIES.items():
        sims = d @ st.encode([text], normalize_embeddings=True)[0]
        ranked = [ids[i] for i in np.argsort(-sims, kind="stable")]
        expected[q] = ndcg10(ranked, data.qrels[q])
    assert score.metric == "ndcg_at_10"
    assert score.value == pytest.approx(np.mean(list(expected.values())), abs=2e-3)
    assert score.per_query == pytest.approx(expected, abs=2e-3)


def test_sts_is_spearman_of_cosine(model, tmp_path):
    rows = [{"sentence1": a, "sentence2": b, "score": s} for a, b, s in [
        ("the patient", "a patient", 4.5), ("cells", "the q", 0.5), ("a cell", "cells", 4.0),
        ("q q", "the patient was", 1.0), ("with cells", "and cells", 3.0), ("in a", "the q", 2.0)]]
    path = tmp_path / "sts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"sentence1": "x", "score": "n/a"}\n')
    data = read_sts(path)
    assert data.skipped == 1 and len(data.rows) == 6
    score = score_task(model, sts_task("toy-sts", data.rows, data.min_score, data.max_score), tmp_path / "w")
    st = SentenceTransformer(model, device="cpu")
    a = st.encode([r["sentence1"] for r in rows], normalize_embeddings=True)
    b = st.encode([r["sentence2"] for r in rows], normalize_embeddings=True)
    expected = spearmanr((a * b).sum(1), [r["score"] for r in rows]).statistic
    assert score.metric == "cosine_spearman" and score.value == pytest.approx(expected, abs=1e-6)


def test_missing_data_is_a_clear_error(tmp_path):
    with pytest.raises(BenchmarkError, match="qrels"):
        read_beir(tmp_path)
    with pytest.raises(TaskUnavailable, match="not an mteb task"):
        hub_task("NoSuchTask")
    with pytest.raises(BenchmarkError, match="not found"):
        read_sts(tmp_path / "nope.jsonl")


def test_heldout_task_adds_distractors_and_keeps_one_relevant_doc():
    train = [(f"q{i}", f"doc {i}") for i in range(50)]
    heldout = [("hq1", "held doc 1"), ("hq2", "held doc 2")]
    corpus, queries, qrels = retrieval_data(train, heldout, pool=20)
    assert len(corpus) == 22 and len(queries) == 2
    texts = {c["id"]: c["text"] for c in corpus}
    assert [texts[next(iter(qrels[q]))] for q in queries] == ["held doc 1", "held doc 2"]
    assert retrieval_data(train, heldout, pool=20)[0] == corpus  # stable


VERSES = {(1, 1): "the patient cells were studied", (1, 2): "a cell of the patient", (2, 1): "cells with q and a",
          (2, 2): "the q was in a cell", (2, 3): "a cell of the patient", (3, 1): "and the cells were q"}


def test_verse_task_scores_without_the_query_itself(model, tmp_path):
    heldout = [(VERSES[1, 1], VERSES[2, 1]), (VERSES[1, 1], VERSES[2, 3]), (VERSES[2, 2], VERSES[3, 1]),
               (VERSES[3, 1], "a cited text that is no verse"), (VERSES[2, 2], VERSES[2, 2])]
    corpus, queries, qrels, missing = verse_retrieval_data(heldout, VERSES)
    assert missing == 1 and len(corpus) == 5  # (2, 3) has the text of (1, 2): one document "1:2"
    assert queries == {"1:1": VERSES[1, 1], "2:2": VERSES[2, 2]}
    assert qrels == {"1:1": {"2:1": 1, "1:2": 1}, "2:2": {"3:1": 1}}  # a self-link is no judgement
    score = score_task(model, retrieval_task("verses", corpus, queries, qrels, ignore_identical_ids=True),
                       tmp_path / "w")
    st = SentenceTransformer(model, device="cpu")
    ids = [c["id"] for c in corpus]
    d = st.encode([c["text"] for c in corpus], normalize_embeddings=True)
    expected = {}
    for q, text in queries.items():
        sims = d @ st.encode([text], normalize_embeddings=True)[0]
        ranked = [ids[i] for i in np.argsort(-sims, kind="stable") if ids[i] != q]  # never the query's own verse
        expected[q] = ndcg10(ranked, qrels[q])
    assert score.per_query == pytest.approx(expected, abs=2e-3)
    assert score.value == pytest.approx(np.mean(list(expected.values())), abs=2e-3)


def test_report_marks_the_best_and_embeds_images(tmp_path):
    from mosaic_core.evaluate.scoring import TaskScore

    scores = {"base": [TaskScore("A", "ndcg_at_10", 0.5, per_query={"q1": 0.2, "q2": 0.8}),
                       TaskScore("B", "cosine_spearman", 0.7)],
              "adapted": [TaskScore("A", "ndcg_at_10", 0.6, per_query={"q1": 0.4, "q2": 0.8}),
                          TaskScore("B", "cosine_spearman", 0.65)]}
    paths = write_report(scores, tmp_path, {"model base": "x"})
    md = paths["markdown"].read_text()
    assert "| base | 50.00 | **70.00** | 60.00 |" in md
    assert "| adapted | **60.00** | 65.00 | **62.50** |" in md
    html = paths["html"].read_text()
    assert html.count("data:image/png;base64,") == 2 and "class=best" in html
    assert paths["bars"].read_bytes()[:4] == b"\x89PNG" and paths["boxplot"].exists()


def test_report_gives_each_model_a_paired_interval_against_the_first(tmp_path):
    from mosaic_core.evaluate.report import paired_differences
    from mosaic_core.evaluate.scoring import TaskScore

    queries = [f"q{i}" for i in range(100)]
    base = {q: 0.5 for q in queries}
    better = {q: 0.7 if i < 20 else 0.5 for i, q in enumerate(queries)}  # +0.2 on a fifth of the queries
    noisy = {q: 0.5 + (0.3 if i % 2 else -0.3) for i, q in enumerate(queries)}  # as many up as down
    scores = {"base": [TaskScore("A", "ndcg_at_10", 0.5, per_query=base), TaskScore("B", "cosine_spearman", 0.7)],
              "better": [TaskScore("A", "ndcg_at_10", 0.54, per_query=better)],
              "noisy": [TaskScore("A", "ndcg_at_10", 0.5, per_query=noisy)],
              "same": [TaskScore("A", "ndcg_at_10", 0.5, per_query=dict(base))]}
    diffs = {d["model"]: d for d in paired_differences(scores)}
    assert set(diffs) == {"better", "noisy", "same"}  # only tasks scored per query
    b, n, s = diffs["better"], diffs["noisy"], diffs["same"]
    assert b["mean"] == pytest.approx(0.04) and 0 < b["low"] < 0.04 < b["high"] and b["changed"] == 20
    assert n["mean"] == pytest.approx(0.0) and n["low"] < 0 < n["high"] and n["changed"] == 100
    assert (s["mean"], s["low"], s["high"], s["changed"]) == (0.0, 0.0, 0.0, 0)
    assert paired_differences(scores) == list(diffs.values())  # seeded: the same report twice
    md = write_report(scores, tmp_path, {})["markdown"].read_text()
    assert "| better | A | +4.00 | [" in md and "20 of 100" in md
    assert "Against base" in (tmp_path / "report.html").read_text()
