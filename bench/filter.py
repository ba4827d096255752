"""Filter benchmark: encoding throughput vs sentence-transformers, decision agreement, FAISS search.

    python bench/filter.py [--n 1500] [--batch-size 32] [--model offline:all-MiniLM-L6-v2]

Baseline, same run, same real abstracts (``../shared/data/biomed``), same batch size and max
length: ``SentenceTransformer.encode`` with its defaults (fp32). Agreement: the kept/dropped
decisions of the consistency filter (k=2) on embeddings from the default precision versus fp32.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import faiss  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from mosaic_core.consistency import consistency_filter  # noqa: E402
from mosaic_core.encode import Encoder  # noqa: E402
from mosaic_core.models import OFFLINE_MODEL, resolve_model  # noqa: E402
from stage_throughput import PAIRS, read_title_abstract  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--model", default=OFFLINE_MODEL)
    ap.add_argument("--index-size", type=int, default=100_000, help="synthetic vectors for the search timing")
    args = ap.parse_args()
    queries, docs = map(list, zip(*read_title_abstract(PAIRS, args.n), strict=True))
    print(f"{len(docs)} real abstracts, max length {args.max_length}, batch {args.batch_size}, "
          f"{torch.get_num_threads()} threads, model {args.model}")

    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(resolve_model(args.model), device="cpu")
    st.max_seq_length = args.max_length
    _, t_st = timed(lambda: st.encode(docs, batch_size=args.batch_size))
    fp32 = Encoder.load(args.model, normalize=True, precision="fp32", max_length=args.max_length)
    auto = Encoder.load(args.model, normalize=True, precision="auto", max_length=args.max_length)
    d32, t32 = timed(lambda: fp32.encode(docs, args.batch_size))
    dau, tau = timed(lambda: auto.encode(docs, args.batch_size))
    print("\n== encode (documents) ==")
    print(f"SentenceTransformer.encode fp32 {len(docs) / t_st:8.1f} texts/s   (baseline)")
    print(f"mosaic Encoder fp32             {len(docs) / t32:8.1f} texts/s   ratio {t_st / t32:.2f}x")
    print(f"mosaic Encoder auto ({auto.autocast_dtype or 'fp32'}) {len(docs) / tau:8.1f} texts/s   "
          f"ratio {t_st / tau:.2f}x (target >= 1.5x)")
    cos = (d32 * dau).sum(1)
    print(f"cosine(fp32, auto) per text: min {cos.min():.5f}, mean {cos.mean():.6f}")

    q32 = dataclasses.replace(fp32, max_length=64).encode(queries, args.batch_size)
    qau = dataclasses.replace(auto, max_length=64).encode(queries, args.batch_size)
    k32 = consistency_filter(q32, d32, k=2, doc_keys=docs).kept
    kau = consistency_filter(qau, dau, k=2, doc_keys=docs).kept
    agree = (k32 == kau).mean()
    print("\n== consistency decisions (k=2) ==")
    print(f"kept fp32 {k32.mean():.1%}, kept auto {kau.mean():.1%}; agreement {agree:.4%} "
          f"({int((k32 != kau).sum())} of {len(k32)} differ; target >= 99.9%)")

    print("\n== FAISS exact inner-product search (synthetic unit vectors) ==")
    rng = np.random.default_rng(0)
    dim = d32.shape[1]
    xb = rng.standard_normal((args.index_size, dim), dtype=np.float32)
    xb /= np.linalg.norm(xb, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(dim)
    index.add(xb)
    nq = 2_000
    _, t_search = timed(lambda: index.search(xb[:nq], 10))
    qps = nq / t_search
    print(f"{qps:,.0f} queries/s against {args.index_size:,} docs ({faiss.omp_get_max_threads()} threads)")

    print("\n== projection: 20M pairs in 1M-pair chunks on this machine ==")
    enc_rate = len(docs) / tau
    qps_1m = qps * args.index_size / 1_000_000  # flat search cost grows linearly with index size
    enc_h = 2 * 20_000_000 / enc_rate / 3600
    search_h = 20 * (1_000_000 / qps_1m) / 3600
    print(f"encode 40M texts: {enc_h:,.0f} h; search 20 chunks: {search_h:,.0f} h "
          "on these 2 CPU cores; the real run belongs on a GPU")


if __name__ == "__main__":
    main()
