"""``mosaic eval --dims`` (issue 41): each task scored on embeddings cut to fewer dimensions and
renormalised, and the task × dimension table of the report and the model card."""

import numpy as np
import pytest
import typer
from builders import tiny_bert
from pydantic import ValidationError
from sentence_transformers import SentenceTransformer

from cli.evaluate import parse_dims
from mosaic_core.config import EvalConfig
from mosaic_core.eval_tasks import MtebTask
from mosaic_core.evaluate.report import write_report
from mosaic_core.evaluate.scoring import TaskScore, retrieval_task, score_task
from mosaic_core.modeling.card import CardFacts, render

DOCS = {"d1": "the patient cells were studied", "d2": "a cell of the patient", "d3": "cells with q and a",
        "d4": "the q was in a cell", "d5": "patient with cells in the q", "d6": "and the cells were q"}
QUERIES = {"q1": "patient cells", "q2": "q cell", "q3": "cells and q", "q4": "the patient"}
QRELS = {"q1": {"d1": 1, "d5": 1}, "q2": {"d4": 1}, "q3": {"d3": 2, "d6": 1}, "q4": {"d2": 1}}


def ndcg10(ranked: list[str], rel: dict[str, int]) -> float:
    dcg = sum(rel.get(d, 0) / np.log2(i + 2) for i, d in enumerate(ranked[:10]))
    idcg = sum(r / np.log2(i + 2) for i, r in enumerate(sorted(rel.values(), reverse=True)))
    return dcg / idcg


def test_scores_at_a_dimension_are_those_of_cut_renormalised_embeddings(tmp_path):
    model = str(tiny_bert(tmp_path / "m"))  # hidden 32
    corpus = [{"id": k, "title": "", "text": v} for k, v in DOCS.items()]
    score = score_task(model, retrieval_task("toy", corpus, QUERIES, QRELS), tmp_path / "w", dim=4)
    st = SentenceTransformer(model, device="cpu")
    ids = list(DOCS)

    def cut(x):
        return x[..., :4] / np.linalg.norm(x[..., :4], axis=-1, keepdims=True)

    d = cut(st.encode([DOCS[i] for i in ids]))
    expected = {q: ndcg10([ids[i] for i in np.argsort(-(d @ cut(st.encode([t]))[0]), kind="stable")], QRELS[q])
                for q, t in QUERIES.items()}
    whole = st.encode([DOCS[i] for i in ids], normalize_embeddings=True)
    uncut = {q: ndcg10([ids[i] for i in np.argsort(-(whole @ st.encode(t, normalize_embeddings=True)), kind="stable")],
                       QRELS[q]) for q, t in QUERIES.items()}
    assert score.dim == 4 and score.task == "toy"  # the flow names it toy@4
    assert score.per_query == pytest.approx(expected, abs=2e-3)
    assert score.per_query != pytest.approx(uncut, abs=2e-3)  # 4 of 32 dimensions rank differently
    with pytest.raises(ValueError, match="32-d embeddings; give dimensions of at most 32"):
        score_task(model, retrieval_task("toy", corpus, QUERIES, QRELS), tmp_path / "w3", dim=64)


def test_dims_are_parsed_and_validated():
    assert parse_dims("384,128, 64") == (384, 128, 64) and parse_dims(None) is None
    for bad in ("", "a,b", "64,64", "128,0"):
        with pytest.raises(typer.BadParameter, match="distinct positive"):
            parse_dims(bad)
    task = MtebTask(name="BIOSSES")
    assert EvalConfig(tasks=(task,), dims=[384, 64]).dims == (384, 64)
    with pytest.raises(ValidationError, match="distinct positive"):
        EvalConfig(tasks=(task,), dims=[64, 64])


def _scores(model: str, values: dict[int | None, float]) -> list[TaskScore]:
    return [TaskScore("heldout" if d is None else f"heldout@{d}", "ndcg_at_10", v, dim=d) for d, v in values.items()]


def test_report_and_card_show_a_task_by_dimension_table(tmp_path):
    scores = {"plain": _scores("plain", {384: 0.9, 64: 0.7}), "matryoshka": _scores("matryoshka", {384: 0.9, 64: 0.8})}
    paths = write_report(scores, tmp_path / "r", {}, [])
    md = paths["markdown"].read_text()
    assert "| model | task | 384 d | 64 d |" in md
    assert "| plain | heldout | 90.00 | 70.00 |" in md and "| matryoshka | heldout | 90.00 | 80.00 |" in md
    assert "renormalised" in paths["html"].read_text()
    assert "d |" not in write_report({"m": _scores("m", {None: 0.9})}, tmp_path / "r2", {}, [])["markdown"].read_text()

    card = render(CardFacts("m", "base", "biomedicine", scores={
        "heldout": {"metric": "ndcg_at_10", "value": 0.91, "base": 0.88},
        "heldout@384": {"metric": "ndcg_at_10", "value": 0.91, "base": 0.88, "dim": 384},
        "heldout@64": {"metric": "ndcg_at_10", "value": 0.8, "base": 0.7, "dim": 64}}))
    assert "| heldout | ndcg_at_10 | 91.00 | 88.00 | +3.00 |" in card
    assert "### Truncated embeddings" in card and "| task | 384 d | 64 d |" in card
    assert "| heldout | 91.00 | 80.00 |" in card
    assert "| heldout@64 |" not in card  # cut scores live in their own table
