"""Filter benchmark: encoding throughput vs sentence-transformers, decision agreement, exact search.

    python bench/filter.py [--n 2000] [--batch-size 32] [--model offline:all-MiniLM-L6-v2]
    python bench/filter.py --device cuda --model thenlper/gte-base   # on a GPU machine
    python bench/filter.py --device cuda --size bert-base   # gte-base's shape where it cannot be loaded

Baseline, same run, same real abstracts (``../shared/data/biomed``, repeated to ``--n`` when
more are asked for), same max length: ``SentenceTransformer.encode`` with its defaults (fp32,
``--batch-size`` texts). Ours: the filter's own settings (``precision=auto``; on CUDA, batches of
131,072 padded tokens), and on CPU the ONNX backends (``filter.backend: onnx | onnx-int8``: the
model exported and verified as the filter exports it, run inside the same ``Encoder``).
Agreement: the kept/dropped decisions of the consistency filter (``FilterConfig``'s default k,
queries and documents truncated at its max lengths) on embeddings from the default precision
and from each ONNX backend versus torch fp32. Search: the filter's exact top-k
(faiss, or torch top-k on a GPU without faiss-gpu) over ``--index-size`` synthetic unit
vectors; the projection scales both rates to 20M pairs in 1M-pair chunks.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import faiss  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from stage_throughput import PAIRS, read_title_abstract  # noqa: E402
from train_step import bert_base  # noqa: E402

from mosaic_core.config import FilterConfig  # noqa: E402
from mosaic_core.data.consistency import consistency_filter, search_top  # noqa: E402
from mosaic_core.modeling.encode import GPU_BATCH_TOKENS, Encoder  # noqa: E402
from mosaic_core.export import cached_export, exported_encoder  # noqa: E402
from mosaic_core.modeling.refs import OFFLINE_MODEL, resolve_model  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="real pairs (title -> abstract) to encode and filter")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--model", default=OFFLINE_MODEL)
    ap.add_argument("--size", choices=["model", "bert-base"], default="model",
                    help="bert-base: a random 12 x 768 encoder (gte-base's shape) over --model's tokenizer, for "
                    "throughput where gte-base cannot be loaded (its decisions then mean nothing)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--search", choices=["auto", "faiss", "torch"], default="auto")
    ap.add_argument("--backends", nargs="*", default=["onnx", "onnx-int8"], choices=["onnx", "onnx-int8"],
                    help="ONNX backends to time and compare (CPU only; none: skip)")
    ap.add_argument("--index-size", type=int, default=None,
                    help="synthetic vectors for the search timing (default: 100,000 on CPU, 1M on CUDA)")
    args = ap.parse_args()
    if args.size == "bert-base":
        args.model = str(bert_base(resolve_model(args.model), Path(tempfile.mkdtemp()) / "bert-base"))
    cuda = args.device == "cuda"
    index_size = args.index_size or (1_000_000 if cuda else 100_000)
    pairs = read_title_abstract(PAIRS, args.n)
    pairs = (pairs * -(-args.n // len(pairs)))[: args.n]
    queries, docs = map(list, zip(*pairs, strict=True))
    ours = f"{GPU_BATCH_TOKENS:,} tokens" if cuda else f"{args.batch_size} texts"
    print(f"{len(docs)} real abstracts, max length {args.max_length}, device {args.device} "
          f"({torch.cuda.get_device_name() if cuda else f'{torch.get_num_threads()} threads'}), "
          f"batch: baseline {args.batch_size} texts, ours {ours}; model {args.model}")

    from sentence_transformers import SentenceTransformer

    defaults = FilterConfig()
    st = SentenceTransformer(resolve_model(args.model), device=args.device)
    st.max_seq_length = args.max_length
    st.encode(docs[:8], batch_size=args.batch_size)  # warm-up
    _, t_st = timed(lambda: st.encode(docs, batch_size=args.batch_size))
    fp32 = Encoder.load(args.model, normalize=True, precision="fp32", max_length=args.max_length, device=args.device)
    auto = Encoder.load(args.model, normalize=True, precision="auto", max_length=args.max_length, device=args.device)
    encoders = {"torch fp32": fp32}
    if auto.autocast_dtype is None:  # the same computation as fp32: not timed twice
        print("precision auto resolves to fp32 here (no native bf16): torch auto = torch fp32")
    else:
        encoders[f"torch auto (resolved {auto.autocast_dtype})"] = auto
    if args.backends and cuda:
        print("ONNX backends skipped: they run on CPU (pass --device cpu)")
    for kind in args.backends if not cuda else ():
        folder, t_export = timed(lambda kind=kind: cached_export(args.model, kind, Path(tempfile.mkdtemp()) / "onnx"))
        print(f"exported {kind} in {t_export:.0f} s (verified against PyTorch): {folder}")
        encoders[kind] = exported_encoder(folder, normalize=True, max_length=args.max_length)
    print(f"\n== encode (documents, max length {args.max_length}) ==")
    print(f"{'SentenceTransformer.encode fp32':36s} {len(docs) / t_st:8.1f} texts/s   (baseline)")
    embedded = {}
    for name, enc in encoders.items():
        enc.encode(docs[:8], args.batch_size, kind="document")  # warm-up
        d, t = timed(lambda enc=enc: enc.encode(docs, args.batch_size, kind="document"))
        q = enc.with_max_length(defaults.query_max_length).encode(queries, args.batch_size, kind="query")
        embedded[name] = (q, d, t)
        print(f"{name:36s} {len(docs) / t:8.1f} texts/s   ratio {t_st / t:.2f}x")
    q32, d32, _ = embedded["torch fp32"]
    k32 = consistency_filter(q32, d32, k=defaults.k, doc_keys=docs).kept
    print(f"\n== consistency decisions (k={defaults.k}, queries at {defaults.query_max_length} tokens) "
          f"against torch fp32 (kept {k32.mean():.1%}) ==")
    for name, (q, d, t) in list(embedded.items())[1:]:
        kept = consistency_filter(q, d, k=defaults.k, doc_keys=docs).kept
        cos = (d32 * d).sum(1)
        goal = "  goal (>= 2x, >= 99.5%) " + ("met" if t_st / t >= 2 and (kept == k32).mean() >= 0.995 else
                                              "NOT met") if name in args.backends else ""
        print(f"{name:36s} identical {(kept == k32).mean():.4%} ({int((kept != k32).sum())} of {len(k32)} differ), "
              f"kept {kept.mean():.1%}; cosine to fp32 min {cos.min():.5f} mean {cos.mean():.6f}; "
              f"speed {t_st / t:.2f}x ST{goal}")
    tau = embedded[next((n for n in encoders if n.startswith("torch auto")), "torch fp32")][2]

    print("\n== exact inner-product search (synthetic unit vectors) ==")
    rng = np.random.default_rng(0)
    dim = d32.shape[1]
    xb = rng.standard_normal((index_size, dim), dtype=np.float32)
    xb /= np.linalg.norm(xb, axis=1, keepdims=True)
    nq = 20_000 if cuda else 2_000
    search_top(xb[:100], xb[:1000], 10, args.search)  # warm-up (CUDA context, kernels)
    _, t_search = timed(lambda: search_top(xb[:nq], xb, 10, args.search))
    qps = nq / t_search
    where = "GPU" if cuda else f"{faiss.omp_get_max_threads()} threads"
    print(f"{qps:,.0f} queries/s against {index_size:,} docs ({args.search} search, {where})")

    print(f"\n== projection: 20M pairs in 1M-pair chunks on this {'GPU' if cuda else 'machine'} ==")
    enc_rate = len(docs) / tau
    qps_1m = qps * index_size / 1_000_000  # flat search cost grows linearly with index size
    enc_h = 2 * 20_000_000 / enc_rate / 3600  # queries are shorter than abstracts: an upper bound
    search_h = 20 * (1_000_000 / qps_1m) / 3600
    unit = "GPU-hours" if cuda else "h on these CPU cores"
    print(f"encode 40M texts: {enc_h:,.1f} {unit}; search 20 chunks: {search_h:,.1f} {unit}; "
          f"total {enc_h + search_h:,.1f}")


if __name__ == "__main__":
    main()
