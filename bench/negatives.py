"""What a hard-negative rule keeps out on the real biomedical pairs: of the negatives the default
rule (any other distinct document scoring below the pair's own) mines, how many score within a
margin of the positive (NV-Retriever's TopK-PercPos; likely other answers) or are near duplicates
of the positive, and how many negatives per pair are left.

    python bench/negatives.py [--pairs FILE] [--negatives 1,3] [--model offline:all-MiniLM-L6-v2]

The pairs are encoded once as mining encodes them (queries at 64 tokens, documents at 128, the
model's prompts) and searched as one chunk (the filter's exact search); every rule is applied to
the same search. Prints a table per number of negatives asked for.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mosaic_core.modeling.refs import OFFLINE_MODEL  # noqa: E402

PAIRS = ROOT.parent / "shared" / "data" / "biomed" / "biomed_title_abstract.jsonl"
RULES = {"below the positive (the default)": {},
         "margin 0.95 only": {"margin": 0.95, "duplicate_cosine": 1.0},
         "margin 0.95, near duplicates at cosine 0.98": {"margin": 0.95}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=Path, default=PAIRS)
    parser.add_argument("--query-column", default="title")
    parser.add_argument("--document-column", default="abstract")
    parser.add_argument("--negatives", default="1,3")
    parser.add_argument("--model", default=OFFLINE_MODEL)
    args = parser.parse_args()

    import numpy as np
    import pyarrow.json as pajson

    from bench.machine import cpu_name
    from mosaic_core.config_data import NegativeRule
    from mosaic_core.data.consistency import consistency_filter
    from mosaic_core.modeling.encode import Encoder
    from mosaic_core.trainer.heldout import text_hashes

    table = pajson.read_json(args.pairs)
    queries = [str(t) for t in table.column(args.query_column).to_pylist()]
    docs = [str(t) for t in table.column(args.document_column).to_pylist()]
    started = time.perf_counter()
    enc = Encoder.load(args.model, normalize=True)
    q = enc.with_max_length(64).encode(queries, kind="query")
    d = enc.with_max_length(128).encode(docs, kind="document")
    took = time.perf_counter() - started
    print(f"{args.pairs.name}: {len(queries):,} pairs encoded with {args.model} in {took:.0f} s on {cpu_name()}")
    keys = text_hashes(docs).tolist()
    for n in (int(x) for x in args.negatives.split(",")):
        print(f"\n{n} negative(s) asked per pair\n")
        print("| rule | negatives per pair | pairs with none | within the margin, left out | near duplicates, "
              "left out |\n| --- | ---: | ---: | ---: | ---: |")
        for name, fields in RULES.items():
            res = consistency_filter(q, d, k=1, doc_keys=keys, negatives=n, rule=NegativeRule(**fields))
            counts = np.array([len(x) for x in res.negatives])
            print(f"| {name} | {counts.mean():.3f} | {int((counts == 0).sum()):,} | "
                  f"{res.rejected['near_positive']:,} | {res.rejected['near_duplicate']:,} |")


if __name__ == "__main__":
    main()
