"""How deterministic stage 1's token choice is: the domain tokenizer trained RUNS times on the
real biomedical pairs (the tokenizers trainer breaks ties at its size limit at random,
huggingface/tokenizers#1794), and how many candidates and selected tokens differ between runs.

    python bench/vocab_determinism.py [--runs 3] [--pairs FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformers import AutoTokenizer  # noqa: E402

from mosaic_core.config import VocabConfig  # noqa: E402
from mosaic_core.modeling.refs import OFFLINE_MODEL, resolve_model  # noqa: E402
from mosaic_core.vocab.build import _Clock, plan_vocabulary, split_heldout  # noqa: E402

PAIRS = ROOT.parent / "shared" / "data" / "biomed" / "biomed_title_abstract.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pairs", type=Path, default=PAIRS, help="JSON lines with title and abstract")
    args = ap.parse_args()
    texts = []
    with open(args.pairs) as fh:
        for line in fh:
            rec = json.loads(line)
            texts += [t for t in (rec["title"], rec["abstract"]) if t]
    cfg = VocabConfig(base_model=OFFLINE_MODEL)
    train, held = split_heldout(texts, cfg.heldout_every)
    tok = AutoTokenizer.from_pretrained(resolve_model(OFFLINE_MODEL))
    runs = []
    for r in range(args.runs):
        plan = plan_vocabulary(tok, train, held, len(tok), cfg, _Clock())
        ladder = {row["min_count"]: row["tokens"] for row in plan.thresholds}
        runs.append((set(plan.candidates), set(plan.chosen.tokens)))
        print(f"run {r}: {len(plan.candidates):,} candidates; tokens at 1 use {ladder[1]:,}, at "
              f"{cfg.min_count} uses (default, chosen) {len(plan.chosen.tokens):,}")
    for r in range(1, args.runs):
        print(f"run {r} vs run 0: {len(runs[0][0] ^ runs[r][0])} candidates differ, "
              f"{len(runs[0][1] ^ runs[r][1])} chosen tokens differ")


if __name__ == "__main__":
    main()
