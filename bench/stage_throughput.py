"""Trainer throughput: the real stage loop (collation, masking, autocast, gradient caching, AdamW,
schedule, clipping, logging) for a contrastive stage and a joint stage from the same stage-1
model on the same real biomedical pairs.

    python bench/stage_throughput.py [--model offline:all-MiniLM-L6-v2] [--pairs FILE]
                                     [--steps 30] [--batch 128] [--chunk N] [--precision auto]

Stage 1 (vocabulary expansion) runs first on the pairs' text, then an untimed joint stage over
the same batches (every batch shape's kernels chosen and allocator pools grown, which a long
run amortises). Each kind then trains ``--steps`` optimizer steps with ``log_every`` 5; the
throughput is the median of the train log's ``pairs_per_s`` windows after the first. Prints
pairs/s for each kind and joint-time / contrastive-time as the trainer's joint-step ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PAIRS = ROOT.parent / "shared" / "data" / "biomed" / "biomed_title_abstract.jsonl"

import torch  # noqa: E402

from mosaic_core.config import StageConfig, VocabConfig  # noqa: E402
from mosaic_core.modeling.encode import resolve_precision  # noqa: E402
from mosaic_core.modeling.refs import OFFLINE_MODEL  # noqa: E402
from mosaic_core.trainer import Hooks, train_stage  # noqa: E402
from mosaic_core.vocab.build import build_expanded_model  # noqa: E402
from storage.pairs_io import CorpusError, read_pairs  # noqa: E402

LOG_EVERY = 5


def read_title_abstract(path: Path, limit: int) -> list[tuple[str, str]]:
    """The first ``limit`` usable (title, abstract) pairs of ``path``, read as ``mosaic train`` reads them."""
    try:
        return read_pairs(str(path), "title", "abstract")[0][:limit]
    except CorpusError as e:
        sys.exit(f"{e}: pass --pairs FILE (JSON lines with title and abstract)")


def bench_stage1(model: str, texts: list[str], out: Path):
    """Stage 1 as the benchmarks' numbers were measured: every candidate used at least once,
    mean-initialised rows (the step cost depends on |V_D|, not on how the rows started)."""
    return build_expanded_model(texts, out, VocabConfig(base_model=model, min_count=1, init="mean"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=OFFLINE_MODEL, help="base model: hub id, local folder or the offline alias")
    ap.add_argument("--pairs", type=Path, default=PAIRS, help="JSON lines with title and abstract")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=None, help="gradient-caching chunk (default: the whole batch)")
    ap.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto")
    args = ap.parse_args()
    if args.steps < 2 * LOG_EVERY:
        sys.exit(f"--steps must be at least {2 * LOG_EVERY}: the first log window is warm-up and not counted")
    pairs = read_title_abstract(args.pairs, args.steps * args.batch)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = resolve_precision(args.precision, device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        stage1 = Path(tmp) / "stage1"
        report = bench_stage1(args.model, [t for p in pairs for t in p], stage1)
        for kind in ("warm-up", "contrastive", "joint"):
            stage = StageConfig(name=kind, kind="joint" if kind == "warm-up" else kind, max_steps=args.steps,
                                batch_size=args.batch, chunk_size=args.chunk, precision=args.precision,
                                log_every=LOG_EVERY, checkpoint_every=10 * args.steps, device=device.type)
            result = train_stage(str(stage1), pairs, stage, Path(tmp) / kind, hooks=Hooks(progress=False))
            if kind == "warm-up":
                continue
            log = [json.loads(line) for line in open(Path(result.out_dir) / "train_log.jsonl")]
            rates[kind] = statistics.median(r["pairs_per_s"] for r in log[1:])
            print(f"{kind:12s} {rates[kind]:9,.1f} pairs/s  final loss {log[-1]['total']:.4f}  "
                  f"({result.steps} steps, {result.seconds:.1f} s with load and save)", flush=True)
    print(f"{args.model} + stage 1 (|V_D| = {report.tokens_added:,}); {where}, "
          f"{'fp32' if dtype is None else 'bf16 autocast'}; batch {args.batch}, chunk {args.chunk or args.batch}, "
          f"{len(pairs):,} pairs")
    print(f"joint/contrastive step time: {rates['contrastive'] / rates['joint']:.2f}")


if __name__ == "__main__":
    main()
