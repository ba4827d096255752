"""Matryoshka against a plain run (issue 41): the same contrastive stage trained twice from the
offline MiniLM on the real biomedical pairs, with and without ``matryoshka_dims``, then every
model (the base too) scored on the held-out pairs with its embeddings cut to each dimension.

    python bench/matryoshka.py [--pairs ../shared/data/biomed/biomed_title_abstract.jsonl]
        [--steps 80] [--batch 32] [--lr 1e-5] [--seed 0] [--dims 384,256,128,64] [--pool 2000]
        [--out /tmp/mosaic-matryoshka]

Both runs: ``train_stage`` on the pairs left after holding out the test and validation pairs of
``mosaic train`` (256 + 256), documents cut to 128 tokens, fp32, no validation (the last model
is kept). The held-out task is ``mosaic eval --heldout``'s: the 256 test titles retrieve their
abstracts among the test abstracts plus ``--pool`` training abstracts. Embeddings are computed
once per model (sentence-transformers, normalised), then cut to each dimension and renormalised
(what ``mosaic eval --dims`` does); NDCG@10 per query by pytrec_eval, as mteb scores it. The
last table is the Matryoshka run against the plain run per dimension: the mean per-query
difference and its 95 % paired bootstrap interval (an interval holding 0 is a difference these
256 queries do not resolve).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from mosaic_core.config import StageConfig  # noqa: E402
from mosaic_core.evaluate.report import paired_differences  # noqa: E402
from mosaic_core.evaluate.scoring import TaskScore  # noqa: E402
from mosaic_core.modeling.refs import OFFLINE_MODEL, resolve_model  # noqa: E402
from mosaic_core.trainer.heldout import retrieval_data, split_indices  # noqa: E402
from mosaic_core.trainer.stage import train_stage  # noqa: E402
from storage.pairs_io import read_pairs  # noqa: E402

DEFAULT_PAIRS = ROOT.parent / "shared" / "data" / "biomed" / "biomed_title_abstract.jsonl"


def ndcg_per_query(q: np.ndarray, d: np.ndarray, qids: list[str], dids: list[str],
                   qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """NDCG@10 of each query over the top 100 documents by cosine (rows already unit length)."""
    import pytrec_eval

    scores = q @ d.T
    top = np.argsort(-scores, axis=1)[:, :100]
    run = {qid: {dids[j]: float(scores[i, j]) for j in top[i]} for i, qid in enumerate(qids)}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"})
    return {qid: s["ndcg_cut_10"] for qid, s in evaluator.evaluate(run).items()}


def cut(x: np.ndarray, dim: int) -> np.ndarray:
    """The first ``dim`` components, renormalised."""
    x = x[:, :dim]
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def score(model_path: str, corpus: list[dict], queries: dict[str, str], qrels, dims: list[int]) -> dict[int, TaskScore]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_path, device="cpu")
    qids, dids = list(queries), [c["id"] for c in corpus]
    q = model.encode([queries[i] for i in qids], batch_size=64, normalize_embeddings=True)
    d = model.encode([c["text"] for c in corpus], batch_size=64, normalize_embeddings=True)
    out = {}
    for dim in dims:
        per_query = ndcg_per_query(cut(q, dim), cut(d, dim), qids, dids, qrels)
        out[dim] = TaskScore(f"heldout@{dim}", "ndcg_at_10", float(np.mean(list(per_query.values()))),
                             len(per_query), per_query=per_query)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=Path, default=DEFAULT_PAIRS)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dims", default="384,256,128,64")
    parser.add_argument("--pool", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path("/tmp/mosaic-matryoshka"))
    args = parser.parse_args()
    if not args.pairs.is_file():
        raise SystemExit(f"{args.pairs}: not found (the real biomedical pairs, ../shared/data/biomed/)")
    dims = [int(x) for x in args.dims.split(",")]
    pairs, _ = read_pairs(str(args.pairs), "title", "abstract")
    split = split_indices(pairs, 256, 256)
    train = [pairs[i] for i in split.train]
    test = [pairs[i] for i in split.test]
    corpus, queries, qrels = retrieval_data(train, test, args.pool)
    print(f"{len(pairs)} pairs: {len(train)} train, {len(test)} held out; {len(corpus)} documents", flush=True)

    models = {"base": resolve_model(OFFLINE_MODEL)}
    for name, extra in (("plain", {}), ("matryoshka", {"matryoshka_dims": tuple(dims)})):
        stage = StageConfig(name=name, kind="contrastive", max_steps=args.steps, batch_size=args.batch, lr=args.lr,
                            seed=args.seed, document_max_length=128, precision="fp32", checkpoint_every=10_000,
                            keep_best=False, device="cpu", **extra)
        out_dir = args.out / name
        if not (out_dir / "stage.json").is_file():
            t0 = time.perf_counter()
            train_stage(OFFLINE_MODEL, train, stage, out_dir)
            print(f"trained {name}: {args.steps} steps × {args.batch} pairs in {time.perf_counter() - t0:.0f} s",
                  flush=True)
        models[name] = str(out_dir)

    scores = {name: score(path, corpus, queries, qrels, dims) for name, path in models.items()}
    print(f"\nHeld-out NDCG@10 × 100 ({len(queries)} queries, {len(corpus)} documents), embeddings cut to each dim:\n")
    print("| model | " + " | ".join(f"{d} d" for d in dims) + " |")
    print("| --- |" + " ---: |" * len(dims))
    for name, by_dim in scores.items():
        print(f"| {name} | " + " | ".join(f"{100 * by_dim[d].value:.2f}" for d in dims) + " |")
    print("\nMatryoshka − plain, per query (95 % paired bootstrap interval):\n")
    print("| dim | difference | 95 % interval | queries changed |")
    print("| ---: | ---: | ---: | ---: |")
    results = {}
    for d in dims:
        (diff,) = paired_differences({"plain": [scores["plain"][d]], "matryoshka": [scores["matryoshka"][d]]})
        results[d] = diff
        print(f"| {d} | {100 * diff['mean']:+.2f} | [{100 * diff['low']:+.2f}, {100 * diff['high']:+.2f}] | "
              f"{diff['changed']} of {diff['queries']} |")
    (args.out / "results.json").write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(args).items()},
         "ndcg10": {m: {d: s.value for d, s in by_dim.items()} for m, by_dim in scores.items()},
         "differences": results}, indent=1))


if __name__ == "__main__":
    main()
