"""Which pair builder helps a domain that has documents only (issue 55): SciFact's corpus taken as
documents (5,183 abstracts with titles; no claim used for training), pairs built by each builder
(title, inverse cloze, cropping, and the default title + inverse cloze), the base fine-tuned on
each through the core trainer (plain contrastive fine-tuning: the pipeline's control recipe, so
the builder is what differs), and every model scored on SciFact's train claims with 95 % paired
intervals against the base. ``DOMAIN=islamic``: the Tafsir Ibn Kathir's 2,696 commentary blocks
taken as documents (no titles; no verse pair used for training), every model scored on the
Islamic verse task (the held-out links of the verse pairs ``PAIRS``, over every verse).

    OUT=/tmp/docbench WORK=/tmp/docbench-work python bench/documents.py
    SMALL=1 OUT=/tmp/docbench WORK=/tmp/docbench-work python bench/documents.py   # a smoke test
    mosaic pairs islamic --quran ../shared/data/islamic/quran_en_sahih.txt \
        --tafsir ../shared/data/islamic/tafsir_ibn_kathir_en.grouped.jsonl \
        --model offline:all-MiniLM-L6-v2 -d /tmp/islamic-pairs
    DOMAIN=islamic PAIRS=/tmp/islamic-pairs BUILDERS=ict,crop OUT=/tmp/docbench-islamic \
        WORK=/tmp/docbench-islamic-work python bench/documents.py

Environment: ``BUILDERS`` (comma-separated recipes, each builders joined by ``+``; default
``title,ict,crop,title+ict``), ``STEPS`` (default 80, the pipeline's default budget), ``BATCH``
(default 32), ``LR`` (default 2e-5), ``BASE`` (default the offline MiniLM), ``DATA`` (default
``../shared/data``), ``BASE_FROM`` (a ``documents.json`` of an earlier run on the same task: its
base scores are reused, not computed again; recipes run apart, several at once, each scored
against the same base), ``DOMAIN`` (``scifact``, the default, or ``islamic``), ``PAIRS`` (islamic:
the verse pairs whose held-out links are the task). Prints and writes ``OUT/documents.json``
after every step, with the machine.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from retrieval import ndcg_per_query, paired, read_jsonl, recorder, scifact, verses  # noqa: E402

SMALL = os.environ.get("SMALL") == "1"
OUT, WORK = Path(os.environ["OUT"]), Path(os.environ["WORK"])
DATA = Path(os.environ.get("DATA", ROOT.parent / "shared" / "data"))
BASE = os.environ.get("BASE", "offline:all-MiniLM-L6-v2")
RECIPES = os.environ.get("BUILDERS", "title,ict,crop,title+ict").split(",")
STEPS = int(os.environ.get("STEPS", "3" if SMALL else "80"))
BATCH = int(os.environ.get("BATCH", "8" if SMALL else "32"))
LR = float(os.environ.get("LR", "2e-5"))
DOMAIN = os.environ.get("DOMAIN", "scifact")
if DOMAIN not in ("scifact", "islamic") or (DOMAIN == "islamic" and not os.environ.get("PAIRS")):
    raise SystemExit(f"DOMAIN={DOMAIN}: give DOMAIN=scifact, or DOMAIN=islamic with PAIRS (a `mosaic pairs islamic` "
                     "data root: its held-out links are the verse task)")
RESULTS: dict = {"events": [], "scores": {}, "pairs": {}, "against_base": {}}
event = recorder(OUT / "documents.json", RESULTS)


def build(documents: list[tuple[str, str, str]], builders: tuple[str, ...]) -> list[tuple[str, str]]:
    """The (query, passage) pairs the ``builders`` make of ``documents``, distinct."""
    from mosaic_core.config_documents import DocumentsConfig
    from mosaic_core.data.documents import BuildStats, document_pairs

    cfg, stats = DocumentsConfig(path=DOMAIN, builders=builders), BuildStats()
    pairs = {(p.query, p.document): None for doc in documents for p in document_pairs(doc, cfg, stats)[1]}
    RESULTS["pairs"]["+".join(builders)] = {"pairs": len(pairs), **stats.as_dict()}
    return list(pairs)


def score(name: str, path: str, task) -> None:
    from sentence_transformers import SentenceTransformer

    from mosaic_core.modeling.refs import resolve_model

    model = SentenceTransformer(resolve_model(path), device="cpu")
    RESULTS["scores"][name] = ndcg_per_query(model, *task)
    event("scored", model=name, ndcg10=round(100 * float(np.mean(RESULTS["scores"][name])), 2))


def fine_tune(name: str, pairs: list[tuple[str, str]], task) -> None:
    from mosaic_core.config import TrainConfig
    from mosaic_core.trainer import train_stage
    from mosaic_core.trainer.heldout import RetrievalProbe, split_indices

    split = split_indices(pairs, 0, 20 if SMALL else 256)
    train = [pairs[i] for i in split.train]
    probe = RetrievalProbe.from_pairs(train, [pairs[i] for i in split.validation], 200 if SMALL else 2000)
    stage = TrainConfig.preset("contrastive-only", {
        "max_steps": STEPS, "batch_size": BATCH, "lr": LR, "hard_negatives": 0, "eval_every": max(1, STEPS // 4),
        "checkpoint_every": 10 ** 6, "document_max_length": 256}).stages[0]
    started = time.time()
    result = train_stage(BASE, train, stage, WORK / name, probe, fingerprint=f"documents-{name}")
    event("trained", recipe=name, pairs=len(train), steps=result.steps, best_step=result.best_step,
          s=round(time.time() - started, 1))
    score(name, str(WORK / name), task)


def main() -> None:
    if DOMAIN == "islamic":
        blocks = read_jsonl(DATA / "islamic" / "tafsir_ibn_kathir_en.grouped.jsonl")[: 300 if SMALL else None]
        documents = [(str(b["id"]), None, b["text"]) for b in blocks]
        task = verses(Path(os.environ["PAIRS"]), DATA / "islamic" / "quran_en_sahih.txt")
    else:
        corpus = read_jsonl(DATA / "scifact" / "corpus.jsonl")[: 300 if SMALL else None]
        documents = [(str(c["_id"]), c.get("title") or None, c["text"]) for c in corpus]
        task = scifact(DATA / "scifact", SMALL)
    event("start", machine=platform.processor() or platform.machine(), cores=os.cpu_count(), torch=torch.__version__,
          domain=DOMAIN, documents=len(documents), queries=len(task[0]), steps=STEPS, batch=BATCH, lr=LR,
          recipes=RECIPES)
    if os.environ.get("BASE_FROM"):
        RESULTS["scores"]["base"] = json.loads(Path(os.environ["BASE_FROM"]).read_text())["scores"]["base"]
        event("base reused", source=os.environ["BASE_FROM"],
              ndcg10=round(100 * float(np.mean(RESULTS["scores"]["base"])), 2))
    else:
        score("base", BASE, task)
    for recipe in RECIPES:
        fine_tune(recipe, build(documents, tuple(recipe.split("+"))), task)
        RESULTS["against_base"][recipe] = paired(RESULTS["scores"][recipe], RESULTS["scores"]["base"])
        event("against base", recipe=recipe, **RESULTS["against_base"][recipe])
    event("done", against_base=RESULTS["against_base"], pairs=RESULTS["pairs"])


if __name__ == "__main__":
    main()
