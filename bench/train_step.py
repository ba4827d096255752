"""Train-step benchmark: cost of the joint (MLM + contrastive) step relative to contrastive only,
with throughput and, on a GPU, model FLOPs utilisation.

    python bench/train_step.py [--size minilm|bert-base] [--batch 32] [--steps 3] [--corpus-pairs 2000]
                               [--device cuda] [--precision auto|fp32|bf16] [--peak-tflops 989]
                               [--model offline:all-MiniLM-L6-v2] [--pairs FILE]
                               [--compile] [--pad-multiple 8]

The model is ``--model`` (the offline MiniLM by default) after stage 1 on real biomedical pairs
(so V_D is real), or a randomly initialised BERT-base-size encoder (12 × 768) over the same
expanded vocabulary. Same batch, same lengths (64 / 256) for every mode; each timing is the
best of ``--steps`` forward+backward passes through :func:`mosaic_core.trainer.gradcache.joint_backward` with one chunk,
under the trainer's autocast. Prints joint/contrastive (domain-restricted MLM) and the
all-token MLM ratio beside it, tokens/s (padded positions, queries + documents) and achieved
TFLOP/s; MFU when the device's peak is known (H100/H200 bf16 dense: 989 TFLOP/s) or given.
Model FLOPs per step: 6·N·T + 12·L·d·s·T over queries and documents (N non-embedding
parameters, T tokens, s padded length) plus 6·(d² + d·R) per masked position (R = |V_D| or |V|).
``--compile`` times the encoder under torch.compile (the stage field ``compile``; the untimed first
round compiles it), ``--pad-multiple`` pads token lengths as the stage field ``pad_to_multiple_of``
does (a stage on a GPU pads to 8 unless told): run with and without each for before and after.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from stage_throughput import PAIRS, bench_stage1, read_title_abstract  # noqa: E402
from transformers import AutoTokenizer, BertConfig, BertModel  # noqa: E402

from mosaic_core.modeling.dual_encoder import DualEncoder, PairCollator, build_model  # noqa: E402
from mosaic_core.modeling.encode import resolve_precision  # noqa: E402
from mosaic_core.modeling.losses import IGNORE, JointLoss  # noqa: E402
from mosaic_core.modeling.modeldir import copy_domain_ids, read_domain_ids  # noqa: E402
from mosaic_core.modeling.refs import OFFLINE_MODEL  # noqa: E402
from mosaic_core.trainer.gradcache import joint_backward  # noqa: E402

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0}


def bert_base(tokenizer_dir: str | Path, out: Path) -> Path:
    """A BERT-base-size encoder (12 x 768, gte-base's shape), randomly initialised, over the
    tokenizer in ``tokenizer_dir``."""
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                         intermediate_size=3072, max_position_embeddings=512)).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def bert_base_over(stage1: Path, out: Path) -> Path:
    """A BERT-base-size encoder, randomly initialised, over ``stage1``'s tokenizer and V_D."""
    copy_domain_ids(stage1, bert_base(stage1, out))
    return out


def step_flops(model: DualEncoder, batch: dict, mlm_rows: int | None) -> float:
    """Model FLOPs of one joint/contrastive step (forward + backward); ``mlm_rows`` None: no MLM."""
    cfg = model.encoder.config
    n = sum(p.numel() for name, p in model.encoder.named_parameters() if "embeddings" not in name)
    flops = 0.0
    for ids in (batch["query_ids"], batch["doc_ids"]):
        tokens, length = ids.numel(), ids.shape[1]
        flops += 6 * n * tokens + 12 * cfg.num_hidden_layers * cfg.hidden_size * length * tokens
    if mlm_rows is not None:
        d = cfg.hidden_size
        flops += 6 * int((batch["labels"] != IGNORE).sum()) * (d * d + d * mlm_rows)
    return flops


def best_steps(model, modes: dict, steps: int, device: torch.device, dtype) -> dict[str, float]:
    """Best wall time per mode; the modes take turns, so drift on a shared machine hits all alike."""
    loss_fn = JointLoss(alpha=0.3, scale=50.0)
    best = dict.fromkeys(modes, float("inf"))
    for round_ in range(steps + 1):  # the first round warms up kernels and allocators, untimed
        for name, (batch, domain, use_mlm) in modes.items():
            model.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t = time.perf_counter()
            with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                joint_backward(model, batch, loss_fn, domain, chunk_size=len(batch["query_ids"]), use_mlm=use_mlm)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if round_ > 0:
                best[name] = min(best[name], time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=("minilm", "bert-base"), default="minilm",
                    help="minilm: --model itself after stage 1; bert-base: a random 12x768 encoder over its vocabulary")
    ap.add_argument("--model", default=OFFLINE_MODEL, help="base model: hub id, local folder or the offline alias")
    ap.add_argument("--pairs", type=Path, default=PAIRS, help="JSON lines with title and abstract")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--corpus-pairs", type=int, default=2000)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                    help="auto: bf16 autocast on CUDA and on CPUs with native bf16 (as the trainer)")
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="the device's peak for this precision, for MFU (default: known H100/H200 bf16 peak)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the encoder (dynamic shapes)")
    ap.add_argument("--pad-multiple", type=int, default=None, help="pad token lengths to a multiple of this")
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = resolve_precision(args.precision, device)
    peak = args.peak_tflops
    if peak is None and device.type == "cuda" and dtype == torch.bfloat16:
        name = torch.cuda.get_device_name(device)
        peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    pairs = read_title_abstract(args.pairs, max(args.corpus_pairs, args.batch))
    texts = [t for p in pairs[: args.corpus_pairs] for t in p]
    with tempfile.TemporaryDirectory() as tmp:
        stage1 = Path(tmp) / "stage1"
        report = bench_stage1(args.model, texts, stage1)
        model_dir = stage1 if args.size == "minilm" else bert_base_over(stage1, Path(tmp) / "bert-base")
        domain = read_domain_ids(stage1)
        tok = AutoTokenizer.from_pretrained(stage1)
        pairs = pairs[: args.batch]
        pad = args.pad_multiple
        domain_batch = PairCollator(tok, domain, generator=torch.Generator().manual_seed(0),
                                    pad_to_multiple_of=pad)(pairs)
        all_batch = PairCollator(tok, None, generator=torch.Generator().manual_seed(0), pad_to_multiple_of=pad)(pairs)
        model, _ = build_model(str(model_dir))
        model.to(device).train()
        if args.compile:
            model.encoder.compile(dynamic=True)
        on = {k: v.to(device) for k, v in domain_batch.items()}, {k: v.to(device) for k, v in all_batch.items()}
        modes = {"contrastive": (on[0], domain.to(device), False), "joint": (on[0], domain.to(device), True),
                 "all": (on[1], None, True)}
        flops = {"contrastive": step_flops(model, domain_batch, None),
                 "joint": step_flops(model, domain_batch, len(domain)),
                 "all": step_flops(model, all_batch, len(tok))}
        threads = f"CPU, {torch.get_num_threads()} threads"
        where = torch.cuda.get_device_name(device) if device.type == "cuda" else threads
        name = args.size if args.size == "bert-base" else args.model
        print(f"{name} after stage 1: |V| = {len(tok):,}, |V_D| = {report.tokens_added:,}; batch {args.batch}, "
              f"query/doc tokens {domain_batch['query_ids'].shape[1]}/{domain_batch['doc_ids'].shape[1]}; "
              f"{where}, {'fp32' if dtype is None else 'bf16 autocast'}, "
              f"attention {model.encoder.config._attn_implementation}"
              f"{', compiled' if args.compile else ''}{f', padded to a multiple of {pad}' if pad else ''}")
        print(f"masked positions: domain {int((domain_batch['labels'] != IGNORE).sum())}, "
              f"all-token {int((all_batch['labels'] != IGNORE).sum())}")
        best = best_steps(model, modes, args.steps, device, dtype)
    tokens = domain_batch["query_ids"].numel() + domain_batch["doc_ids"].numel()
    labels = {"contrastive": "contrastive only    ", "joint": "joint, domain MLM   ", "all": "joint, all-token MLM"}
    for mode, label in labels.items():
        t = best[mode]
        ratio = "(baseline)" if mode == "contrastive" else f"ratio {t / best['contrastive']:.2f}"
        ratio += " (target <= 1.15)" if mode == "joint" else ""
        achieved = flops[mode] / t / 1e12
        mfu = f"  MFU {achieved / peak:.1%}" if peak else ""
        print(f"{label} {t * 1000:9.1f} ms/step  {tokens / t:10,.0f} tokens/s  {achieved:7.2f} TFLOP/s{mfu}  {ratio}")


if __name__ == "__main__":
    main()
