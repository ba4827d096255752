"""The recipes against plain fine-tuning on one GPU call (issue 52): stage 1, mining, the paper
preset, the default recipe (the head-only MLM warm-up a headless base gets, then the paper's
stages) and the control, each trained through the core (no Prefect, which the device image lacks)
and scored on SciFact and the run's held-out pairs, with 95 % paired intervals against the control.

    OUT=/tmp/arms WORK=/tmp/arms-work python bench/gpu_arms.py            # on the lent GPU
    SMALL=1 OUT=/tmp/arms WORK=/tmp/arms-work python bench/gpu_arms.py    # a CPU smoke test (minutes)

Environment: ``OUT`` (results: ``arms.json``, rewritten after every step, so a call cut short
still returns what finished), ``WORK`` (models), ``DATA`` (default ``../shared/data``), ``BASE``
(default the offline MiniLM), ``LIMIT`` (seconds after which no new arm starts; default 480, for a
9-minute call), ``STEPS`` (per stage; default one pass at batch 128 over the training pairs),
``LR`` (default 2e-5). ``SMALL=1``: 400 pairs, batch 8, 2 steps, 20 SciFact queries over their
documents and 300 others. The device
needs pydantic carried as wheels and the ``faiss`` stand-in of ``../shared/tools/gpu/stubs`` (the
core's search takes its torch path on CUDA): ``../shared/tools/gpu/README.md`` says how the core
ran there. The smoke test on the 2-core VM (2026-11-27): 374 s, every arm trained and scored.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from retrieval import ndcg_per_query, paired, read_jsonl, recorder, scifact  # noqa: E402

SMALL = os.environ.get("SMALL") == "1"
OUT, WORK = Path(os.environ["OUT"]), Path(os.environ["WORK"])
DATA = Path(os.environ.get("DATA", ROOT.parent / "shared" / "data"))
BASE = os.environ.get("BASE", "offline:all-MiniLM-L6-v2")
LIMIT = float(os.environ.get("LIMIT", "480"))
LR = float(os.environ.get("LR", "2e-5"))
BATCH = 8 if SMALL else 128
T0 = time.time()
RESULTS: dict = {"events": [], "scores": {}, "train": {}, "against_control": {}}
event = recorder(OUT / "arms.json", RESULTS)


def tasks(pairs: list[tuple[str, str]], split) -> dict:
    """SciFact (train claims over the corpus) and the held-out test pairs over their documents and
    2,000 training documents, as (queries, documents, relevant sets)."""
    from mosaic_core.trainer.heldout import retrieval_data

    scifact_task = scifact(DATA / "scifact", SMALL)
    train = [pairs[i] for i in split.train]
    docs, queries, rel = retrieval_data(train, [pairs[i] for i in split.test], 300 if SMALL else 2000)
    ids = {c["id"]: i for i, c in enumerate(docs)}
    heldout = (list(queries.values()), [c["text"] for c in docs],
               [{ids[d] for d in rel[q]} for q in queries])
    return {"scifact": scifact_task, "heldout": heldout}


def score(name: str, path: str, benchmarks: dict) -> None:
    from sentence_transformers import SentenceTransformer

    from mosaic_core.modeling.refs import resolve_model

    model = SentenceTransformer(resolve_model(path), device="cuda" if torch.cuda.is_available() else "cpu")
    RESULTS["scores"][name] = {task: ndcg_per_query(model, *data) for task, data in benchmarks.items()}
    event("scored", model=name, **{t: round(100 * float(np.mean(v)), 2) for t, v in RESULTS["scores"][name].items()})


def stage1(pairs: list[tuple[str, str]]) -> str:
    from mosaic_core.config import VocabConfig
    from mosaic_core.vocab.build import build_expanded_model

    out = WORK / "stage1"
    cfg = VocabConfig(base_model=BASE, **({"min_count": 5, "distill": {"max_steps": 5, "eval_every": 2}}
                                          if SMALL else {}))
    started = time.time()
    report = build_expanded_model([t for p in pairs for t in p], out, cfg)
    event("stage1", s=round(time.time() - started, 1), tokens=report.tokens_added,
          fertility=[report.fertility_before, report.fertility_after])
    return str(out)


def mined(pairs: list[tuple[str, str]]) -> list[tuple[str, ...]]:
    """Each pair with one hard negative, found by the base as the consistency filter finds them."""
    from mosaic_core.data.consistency import consistency_filter
    from mosaic_core.modeling.encode import Encoder

    started = time.time()
    enc = Encoder.load(BASE, normalize=True)
    q = enc.with_max_length(64).encode([p[0] for p in pairs], kind="query")
    d = enc.with_max_length(256).encode([p[1] for p in pairs], kind="document")
    res = consistency_filter(q, d, k=1, doc_keys=[p[1] for p in pairs], negatives=1)
    event("mined", s=round(time.time() - started, 1), negatives=int(sum(map(len, res.negatives))))
    return [(*p, *(pairs[j][1] for j in negs)) for p, negs in zip(pairs, res.negatives, strict=True)]


def arm(name: str, input_model: str, cfg, data, probe, benchmarks: dict) -> None:
    from mosaic_core.trainer import train_stage

    model = input_model
    for i, stage in enumerate(cfg.stages):
        out = WORK / name / f"{i + 1}-{stage.name}"
        started = time.time()
        result = train_stage(model, data, stage, out, probe, fingerprint=f"{name}-{stage.name}")
        RESULTS["train"][f"{name}/{stage.name}"] = {"s": round(time.time() - started, 1), "steps": result.steps,
                                                    "best_step": result.best_step, "final": result.final}
        event("trained", arm=name, stage=stage.name, steps=result.steps, s=round(time.time() - started, 1))
        model = str(out)
    score(name, model, benchmarks)


def main() -> None:
    from mosaic_core.config import TrainConfig
    from mosaic_core.modeling.dual_encoder import ships_mlm_head
    from mosaic_core.trainer import PairSet
    from mosaic_core.trainer.heldout import RetrievalProbe, split_indices

    rows = read_jsonl(DATA / "biomed" / "biomed_title_abstract.jsonl")[: 400 if SMALL else None]
    pairs = [(r["title"], r["abstract"]) for r in rows if r.get("title") and r.get("abstract")]
    split = split_indices(pairs, *((40, 40) if SMALL else (256, 256)))
    benchmarks = tasks(pairs, split)
    event("start", device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
          torch=torch.__version__, pairs=len(pairs), train=len(split.train), batch=BATCH, lr=LR)
    score("base", BASE, benchmarks)
    s1 = stage1(pairs)
    score("stage1", s1, benchmarks)
    examples = mined(pairs)
    held = {pairs[i][1] for i in (*split.validation, *split.test)}
    data = PairSet.of([(*examples[i][:2], *(n for n in examples[i][2:] if n not in held)) for i in split.train])
    probe = RetrievalProbe.from_pairs([pairs[i] for i in split.train], [pairs[i] for i in split.validation],
                                      200 if SMALL else 1000)
    steps = int(os.environ.get("STEPS", 2 if SMALL else max(1, len(split.train) // BATCH)))
    budget = {"batch_size": BATCH, "lr": LR, "max_steps": steps, "hard_negatives": 1,
              "eval_every": max(1, steps // 4), "checkpoint_every": 10 ** 6}
    paper = TrainConfig.preset("paper", budget)
    recipes = {"control": (BASE, paper.control()), "paper": (s1, paper),
               "default": (s1, paper.with_warmup(ships_mlm_head(s1)))}
    for name, (model, cfg) in recipes.items():
        if time.time() - T0 > LIMIT:
            event("skipped", arm=name)
            continue
        try:
            arm(name, model, cfg, data, probe, benchmarks)
        except Exception as exc:  # one arm's failure leaves the others' numbers
            event("arm-failed", arm=name, error=f"{type(exc).__name__}: {exc}"[:600], tb=traceback.format_exc()[-1500:])
    control = RESULTS["scores"].get("control")
    for name, by_task in RESULTS["scores"].items():
        if control and name != "control":
            RESULTS["against_control"][name] = {t: paired(v, control[t]) for t, v in by_task.items()}
    event("done", against_control=RESULTS["against_control"])


if __name__ == "__main__":
    main()
