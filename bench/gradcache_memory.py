"""Gradient-caching benchmark: peak memory of a big contrastive batch, chunk by chunk.

    python bench/gradcache_memory.py [--batch 128] [--chunk 16] [--doc-tokens 256]

Each configuration runs in a fresh process (peak RSS is per process): the offline MiniLM,
a joint step (MLM + InfoNCE) on ``--batch`` real biomedical pairs. Prints the extra peak
memory of one step above the loaded model for (batch B, whole batch at once), (batch B,
chunks of c) and (batch c) — the chunk's own footprint — and the largest difference between
the cached and the plain big-batch gradients.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"


def child(batch: int, chunk: int, doc_tokens: int, grads_out: str | None) -> None:
    import torch
    from transformers import AutoTokenizer

    from mosaic_core.gradcache import joint_backward
    from mosaic_core.losses import JointLoss
    from mosaic_core.model import PairCollator, build_model
    from mosaic_core.models import OFFLINE_MODEL, resolve_model

    torch.manual_seed(0)
    recs = [json.loads(line) for line in open(SHARED / "biomed" / "biomed_title_abstract.jsonl")]
    pairs = [(r["title"], r["abstract"]) for r in recs if r.get("title") and r.get("abstract")][:batch]
    tok = AutoTokenizer.from_pretrained(resolve_model(OFFLINE_MODEL))
    # All-token masking: the offline model has no V_D of its own; the memory shape is the same.
    data = PairCollator(tok, None, document_max_length=doc_tokens, generator=torch.Generator().manual_seed(0))(pairs)
    model, _ = build_model(OFFLINE_MODEL)
    model.eval()  # no dropout: the plain and cached gradients are compared exactly
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    joint_backward(model, data, JointLoss(), None, chunk_size=chunk)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if grads_out:
        torch.save({n: p.grad for n, p in model.named_parameters() if p.grad is not None}, grads_out)
    print(json.dumps({"extra_mib": (peak - base) / 1024}))


def run(batch: int, chunk: int, doc_tokens: int, grads_out: str | None = None) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", str(batch), str(chunk), str(doc_tokens),
                          grads_out or ""], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["extra_mib"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--doc-tokens", type=int, default=256)
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        b, c, t, g = args.child
        return child(int(b), int(c), int(t), g or None)
    if not (SHARED / "biomed").exists():
        sys.exit("this benchmark needs ../shared/data/biomed")
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        plain = run(args.batch, args.batch, args.doc_tokens, f"{tmp}/plain.pt")
        cached = run(args.batch, args.chunk, args.doc_tokens, f"{tmp}/cached.pt")
        small = run(args.chunk, args.chunk, args.doc_tokens)
        a, b = torch.load(f"{tmp}/plain.pt"), torch.load(f"{tmp}/cached.pt")
        diff = max(float((a[n] - b[n]).abs().max()) for n in a)
        scale = max(float(a[n].abs().max()) for n in a)
    print(f"offline MiniLM, joint step, doc tokens {args.doc_tokens}, fp32, peak RSS above the loaded model:")
    print(f"batch {args.batch:4d}, one pass        {plain:8.0f} MiB  (baseline)")
    print(f"batch {args.batch:4d}, chunks of {args.chunk:3d}  {cached:8.0f} MiB  ratio {cached / plain:.2f}")
    print(f"batch {args.chunk:4d}, one pass        {small:8.0f} MiB  ratio {small / plain:.2f} (the chunk's footprint)")
    print(f"gradients: max |cached - plain| = {diff:.2e} (largest gradient entry {scale:.2e})")


if __name__ == "__main__":
    main()
