"""Peak memory of a real training step by chunk size: what the activation estimate that chooses
a stage's chunk (:mod:`mosaic_core.trainer.memory`) is checked against.

    python bench/train_memory.py [--pairs FILE] [--chunks 32,16,8,4] [--batch 32]
        [--model offline:all-MiniLM-L6-v2]

Each chunk size runs in a fresh process: the contrastive-only preset's stage (train mode, dropout
on, ``precision=auto``) is built on ``--pairs`` (a pairs file with query and document columns),
then three optimizer steps of ``--batch`` pairs run. Prints the peak RSS above the built stage,
the seconds per step, the precision it resolved, and the estimate for the same chunk.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mosaic_core.modeling.refs import OFFLINE_MODEL  # noqa: E402

PAIRS = ROOT.parent / "shared" / "data" / "biomed" / "biomed_title_abstract.jsonl"


def child(args: argparse.Namespace, chunk: int, work: str) -> None:
    from mosaic_core.config import PRESETS, TrainConfig
    from mosaic_core.modeling.refs import resolve_model
    from mosaic_core.trainer.build import build_parts
    from mosaic_core.trainer.loop import Hooks, StepLoop, train_step
    from mosaic_core.trainer.memory import sequence_bytes
    from tasks.train import load_split

    stage = PRESETS["contrastive-only"][0].model_copy(
        update={"chunk_size": chunk, "hard_negatives": 0, "batch_size": args.batch})
    data, _ = load_split(str(args.pairs), TrainConfig(query_column=args.columns[0], document_column=args.columns[1]),
                         stage, work)
    parts = build_parts(stage, resolve_model(args.model), args.model, data)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    loop = StepLoop(parts, stage, data, Path(work), "", Hooks(), None)
    batches = (loop.make_batch(g) for g in range(3))
    t0 = time.perf_counter()
    for _ in range(3):
        train_step(parts, batches, stage)
    config = parts.model.encoder.config
    pair = sequence_bytes(config, parts.lengths.query) + sequence_bytes(config, parts.lengths.document)
    print(json.dumps({"extra_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base,
                      "s_per_step": (time.perf_counter() - t0) / 3, "dtype": str(parts.dtype),
                      "estimate_mib": min(chunk, args.batch) * pair / 2**20}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=Path, default=PAIRS, help="pairs file (default: the real biomedical pairs)")
    ap.add_argument("--chunks", default="32,16,8,4", help="chunk sizes, comma-separated")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--columns", nargs=2, default=("title", "abstract"), help="query and document columns")
    ap.add_argument("--model", default=OFFLINE_MODEL, help="base model: hub id, local folder or the offline alias")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args, int(args.child[0]), args.child[1])
    if not args.pairs.exists():
        sys.exit(f"{args.pairs}: no such pairs file (--pairs)")
    print(f"{args.model}, batch {args.batch}, peak RSS of three training steps above the built stage:")
    with tempfile.TemporaryDirectory() as work:
        for chunk in (int(c) for c in args.chunks.split(",")):
            out = subprocess.run([sys.executable, __file__, "--pairs", str(args.pairs), "--batch", str(args.batch),
                                  "--model", args.model, "--columns", *args.columns, "--child", str(chunk), work],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"chunk {chunk:4d}: {r['extra_mib']:7.0f} MiB (estimate {r['estimate_mib']:6.0f}), "
                  f"{r['s_per_step']:.1f} s/step, {r['dtype']}")


if __name__ == "__main__":
    main()
