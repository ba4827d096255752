"""How often each new token of a stage 1 occurs in what its distillation trains on, for both
``distill.contexts`` (whole texts, sentences drawn per token), at the default step budget and at
a smaller one. Tokenization only: a minute on one core.

    python bench/distill_coverage.py STAGE1_DIR [--corpus PAIRS] [--steps 1000 200]

STAGE1_DIR is a `mosaic vocab` output built on PAIRS (default: the real biomedical pairs,
title and abstract columns) with the offline MiniLM; the split into training and held-out
texts is the one stage 1 made.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformers import AutoTokenizer  # noqa: E402

from mosaic_core.config import DistillConfig, VocabConfig  # noqa: E402
from mosaic_core.modeling.refs import resolve_model  # noqa: E402
from mosaic_core.vocab.build import split_heldout  # noqa: E402
from mosaic_core.vocab.distill import _windows  # noqa: E402
from mosaic_core.vocab.windows import _order  # noqa: E402
from storage.pairs_io import iter_corpus_texts  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stage1", type=Path)
    ap.add_argument("--corpus", default=str(ROOT.parent / "shared/data/biomed/biomed_title_abstract.jsonl"))
    ap.add_argument("--columns", nargs="+", default=["title", "abstract"])
    ap.add_argument("--base-model", default="offline:all-MiniLM-L6-v2")
    ap.add_argument("--steps", nargs="+", type=int, default=[1000, 200])
    args = ap.parse_args()

    texts = list(iter_corpus_texts(args.corpus, tuple(args.columns)))
    train, heldout = split_heldout(texts, VocabConfig().heldout_every)
    base = AutoTokenizer.from_pretrained(resolve_model(args.base_model))
    new = AutoTokenizer.from_pretrained(args.stage1)
    first, added = len(base), len(new) - len(base)
    print(f"{added} new tokens, {len(train)} training texts")
    for contexts in ("texts", "sentences"):
        cfg = DistillConfig(contexts=contexts)
        windows, _ = _windows(train, heldout, base, new, first, cfg)
        for steps in args.steps:
            n = min(steps, len(windows) // cfg.batch_size) * cfg.batch_size
            seen = Counter(t for j in _order(len(windows), cfg.seed, 0)[:n] for t in windows[j].new_ids if t >= first)
            c = np.array([seen.get(first + k, 0) for k in range(added)])
            print(f"{contexts:9s} {steps:5d} steps: {n:6d} of {len(windows)} windows; occurrences per token "
                  f"min {c.min()}, p10 {np.percentile(c, 10):.0f}, median {np.median(c):.0f}, max {c.max()}; "
                  f"under 10: {(c < 10).sum()}, never: {(c == 0).sum()}")


if __name__ == "__main__":
    main()
