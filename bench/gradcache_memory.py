"""Gradient-caching benchmark: peak memory of a big contrastive batch, chunk by chunk.

    python bench/gradcache_memory.py [--batch 128] [--chunk 16] [--doc-tokens 256] [--device cuda]
                                     [--model offline:all-MiniLM-L6-v2] [--pairs FILE]

Each configuration runs in a fresh process (peak memory is per process): ``--model``, a
joint step (MLM + InfoNCE) in fp32 on ``--batch`` real biomedical pairs. Prints the extra peak
memory of one step above the loaded model (RSS on the CPU, allocated device memory on CUDA)
for (batch B, whole batch at once), (batch B, chunks of c) and (batch c) — the chunk's own
footprint — and the largest difference between the cached and the plain big-batch gradients,
beside the activation estimate that chooses a stage's chunk when none is set
(:mod:`mosaic_core.trainer.memory`).
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

from stage_throughput import PAIRS, read_title_abstract  # noqa: E402

from mosaic_core.modeling.refs import OFFLINE_MODEL  # noqa: E402


def child(args: argparse.Namespace, batch: int, chunk: int, grads_out: str | None) -> None:
    import torch
    from transformers import AutoTokenizer

    from mosaic_core.modeling.dual_encoder import PairCollator, build_model
    from mosaic_core.modeling.losses import JointLoss
    from mosaic_core.modeling.refs import resolve_model
    from mosaic_core.trainer.gradcache import joint_backward

    torch.manual_seed(0)
    device = torch.device(args.device)
    pairs = read_title_abstract(args.pairs, batch)
    tok = AutoTokenizer.from_pretrained(resolve_model(args.model))
    # All-token masking: the base model has no V_D of its own; the memory shape is the same.
    data = PairCollator(tok, None, document_max_length=args.doc_tokens,
                        generator=torch.Generator().manual_seed(0))(pairs)
    model, _ = build_model(args.model)
    model.to(device).eval()  # no dropout: the plain and cached gradients are compared exactly
    data = {k: v.to(device) for k, v in data.items()}
    if device.type == "cuda":
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    joint_backward(model, data, JointLoss(), None, chunk_size=chunk)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" \
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if grads_out:
        torch.save({n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}, grads_out)
    print(json.dumps({"extra_mib": (peak - base) / 2**20}))


def run(args: argparse.Namespace, batch: int, chunk: int, grads_out: str | None = None) -> float:
    forward = ["--model", args.model, "--pairs", str(args.pairs), "--device", args.device,
               "--doc-tokens", str(args.doc_tokens)]
    out = subprocess.run([sys.executable, __file__, *forward, "--child", str(batch), str(chunk), grads_out or ""],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["extra_mib"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--doc-tokens", type=int, default=256)
    ap.add_argument("--device", default="cpu", help="cpu (peak RSS) or cuda (peak allocated device memory)")
    ap.add_argument("--model", default=OFFLINE_MODEL, help="base model: hub id, local folder or the offline alias")
    ap.add_argument("--pairs", type=Path, default=PAIRS, help="JSON lines with title and abstract")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        b, c, g = args.child
        return child(args, int(b), int(c), g or None)
    read_title_abstract(args.pairs, 1)  # a missing file stops here, not in a child process
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        plain = run(args, args.batch, args.batch, f"{tmp}/plain.pt")
        cached = run(args, args.batch, args.chunk, f"{tmp}/cached.pt")
        small = run(args, args.chunk, args.chunk)
        a, b = torch.load(f"{tmp}/plain.pt"), torch.load(f"{tmp}/cached.pt")
        diff = max(float((a[n] - b[n]).abs().max()) for n in a)
        scale = max(float(a[n].abs().max()) for n in a)
    from transformers import AutoConfig

    from mosaic_core.modeling.refs import resolve_model
    from mosaic_core.trainer.memory import sequence_bytes

    config = AutoConfig.from_pretrained(resolve_model(args.model))
    pair = (sequence_bytes(config, 64) + sequence_bytes(config, args.doc_tokens)) / 2**20
    what = "peak allocated device memory" if args.device.startswith("cuda") else "peak RSS"
    print(f"{args.model}, joint step, doc tokens {args.doc_tokens}, fp32, {what} above the loaded model:")
    print(f"batch {args.batch:4d}, one pass        {plain:8.0f} MiB  (baseline)")
    print(f"batch {args.batch:4d}, chunks of {args.chunk:3d}  {cached:8.0f} MiB  ratio {cached / plain:.2f}")
    print(f"batch {args.chunk:4d}, one pass        {small:8.0f} MiB  ratio {small / plain:.2f} (the chunk's footprint)")
    print(f"estimate (64 query, {args.doc_tokens} document tokens): {pair:.0f} MiB a pair; measured "
          f"{(plain - small) / (args.batch - args.chunk):.0f} MiB a pair (batch {args.batch} minus batch {args.chunk})")
    print(f"gradients: max |cached - plain| = {diff:.2e} (largest gradient entry {scale:.2e})")


if __name__ == "__main__":
    main()
