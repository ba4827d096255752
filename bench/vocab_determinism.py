"""How deterministic stage 1's token choice is: the domain tokenizer trained RUNS times on the
real biomedical pairs, and how many candidates and selected tokens differ between runs.

"before": the trainer as it comes (it numbers the ``##`` pieces in hash-map order, which changes
from run to run, and breaks ties between equally frequent merges by those numbers,
huggingface/tokenizers#1794); "after": stage 1 as it trains it, with those pieces declared up
front in a fixed order (``mosaic_core.vocab.tokenizers.marked_characters``).

    python bench/vocab_determinism.py [--runs 3] [--pairs FILE] [--after-only]
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
from mosaic_core.vocab import tokenizers as vocab_tokenizers  # noqa: E402
from mosaic_core.modeling.refs import OFFLINE_MODEL, resolve_model  # noqa: E402
from mosaic_core.vocab.build import _Clock, plan_vocabulary, split_heldout  # noqa: E402

PAIRS = ROOT.parent / "shared" / "data" / "biomed" / "biomed_title_abstract.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pairs", type=Path, default=PAIRS, help="JSON lines with title and abstract")
    ap.add_argument("--after-only", action="store_true", help="skip the trainer as it comes")
    args = ap.parse_args()
    texts = []
    with open(args.pairs) as fh:
        for line in fh:
            rec = json.loads(line)
            texts += [t for t in (rec["title"], rec["abstract"]) if t]
    cfg = VocabConfig(base_model=OFFLINE_MODEL)
    train, held = split_heldout(texts, cfg.heldout_every)
    tok = AutoTokenizer.from_pretrained(resolve_model(OFFLINE_MODEL))
    declared = vocab_tokenizers.marked_characters
    for mode in (("after",) if args.after_only else ("before", "after")):
        vocab_tokenizers.marked_characters = declared if mode == "after" else (lambda state, words: [])
        runs = []
        for r in range(args.runs):
            plan = plan_vocabulary(tok, train, held, len(tok), cfg, _Clock())
            ladder = {row["min_count"]: row["tokens"] for row in plan.thresholds}
            runs.append((plan.domain.get_vocab(), set(plan.candidates), set(plan.chosen.tokens)))
            print(f"{mode}, run {r}: {len(plan.candidates):,} candidates; tokens at 1 use {ladder[1]:,}, at "
                  f"{cfg.min_count} uses (default, chosen) {len(plan.chosen.tokens):,}", flush=True)
        for r in range(1, args.runs):
            same = "identical" if runs[r][0] == runs[0][0] else "differs"
            print(f"{mode}, run {r} vs run 0: domain vocabulary {same} (tokens and ids); "
                  f"{len(runs[0][1] ^ runs[r][1])} candidates differ, "
                  f"{len(runs[0][2] ^ runs[r][2])} chosen tokens differ", flush=True)
    vocab_tokenizers.marked_characters = declared


if __name__ == "__main__":
    main()
