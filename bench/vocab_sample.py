"""What stage 1's corpus sample (``VocabConfig.sample_texts``) changes: the tokens it chooses and
the fertility they give, at several sample sizes of a real corpus, against the whole corpus.

Every size is drawn as stage 1 draws it (the texts with the smallest content hash,
``mosaic_core.vocab.sample.bottom_k``) from the corpus's training texts, and every size is scored
on the same held-out texts (every ``heldout_every``-th text of the whole corpus, which no sample
holds), so the columns compare. Only the tokenizer and the selection run (no rows, no
distillation): the sample decides nothing else.

    python bench/vocab_sample.py [--pairs FILE --columns title abstract] [--sizes 2500 5000 10000]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformers import AutoTokenizer  # noqa: E402

from mosaic_core.config import VocabConfig  # noqa: E402
from mosaic_core.modeling.refs import OFFLINE_MODEL, resolve_model  # noqa: E402
from mosaic_core.vocab.build import _Clock, plan_vocabulary, split_heldout  # noqa: E402
from mosaic_core.vocab.sample import bottom_k  # noqa: E402
from mosaic_core.vocab.selection import Segmenter, fertility_of  # noqa: E402
from mosaic_core.vocab.tokenizers import tokenizer_state  # noqa: E402
from storage.pairs_io import iter_corpus_texts  # noqa: E402

PAIRS = ROOT.parent / "shared" / "data" / "biomed" / "biomed_title_abstract.jsonl"


def compare(chosen: set[str], full: set[str]) -> str:
    """How a sample's tokens compare with the whole corpus's: shared, Jaccard, missing, extra."""
    shared = len(chosen & full)
    return (f"{shared:,} shared (Jaccard {shared / max(len(chosen | full), 1):.3f}); "
            f"{len(full - chosen):,} of the whole corpus's missing, {len(chosen - full):,} not in it")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default=str(PAIRS), help="a pairs file or data root")
    ap.add_argument("--columns", nargs="+", default=["title", "abstract"])
    ap.add_argument("--sizes", nargs="+", type=int, default=[2_500, 5_000, 10_000])
    ap.add_argument("--base-model", default=OFFLINE_MODEL)
    args = ap.parse_args()
    cfg = VocabConfig(base_model=args.base_model)
    texts = list(iter_corpus_texts(args.pairs, tuple(args.columns)))
    train, held = split_heldout(texts, cfg.heldout_every)
    tok = AutoTokenizer.from_pretrained(resolve_model(args.base_model))
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}; {args.pairs}: "
          f"{len(texts):,} texts, {len(train):,} to sample from, {len(held):,} held out (every size scored on them)")
    base_fertility = None
    full = None
    for size in sorted({*args.sizes, len(train)}, reverse=True):
        t0 = time.perf_counter()
        sample = bottom_k(train, size).texts
        plan = plan_vocabulary(tok, sample, held, len(tok), cfg, _Clock())
        chosen = set(plan.chosen.tokens)
        expanded = tokenizer_state(tok)
        plan.spec.insert(expanded["model"], plan.chosen.tokens, plan.first_id, tokenizer_state(plan.domain))
        base_fertility = base_fertility or fertility_of(Segmenter(plan.state), plan.held)[1]
        fertility = fertility_of(Segmenter(expanded), plan.held)[1]
        full = full or chosen
        print(f"sample {len(sample):>7,}: {len(chosen):>5,} tokens; held-out fertility {base_fertility:.3f} -> "
              f"{fertility:.3f}; {compare(chosen, full)}; {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
