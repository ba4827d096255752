"""Train-step benchmark: cost of the joint (MLM + contrastive) step relative to contrastive only.

    python bench/train_step.py [--batch 32] [--steps 3] [--corpus-pairs 2000]

Same model (the offline MiniLM after stage 1 on real biomedical pairs, so V_D is real), same
batch, same lengths (64 / 256); each timing is the best of ``--steps`` forward+backward passes
through :func:`mosaic_core.gradcache.joint_backward` with one chunk. Prints
joint/contrastive (domain-restricted MLM) and the all-token MLM ratio beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"

import torch  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from mosaic_core.gradcache import joint_backward  # noqa: E402
from mosaic_core.losses import IGNORE, JointLoss  # noqa: E402
from mosaic_core.model import PairCollator, build_model  # noqa: E402
from mosaic_core.models import OFFLINE_MODEL  # noqa: E402
from mosaic_core.vocab import build_expanded_model  # noqa: E402


def best_steps(model, modes: dict, steps: int) -> dict[str, float]:
    """Best wall time per mode; the modes take turns, so drift on a shared machine hits all alike."""
    loss_fn = JointLoss(alpha=0.3, scale=50.0)
    best = dict.fromkeys(modes, float("inf"))
    for _ in range(steps):
        for name, (batch, domain, use_mlm) in modes.items():
            model.zero_grad(set_to_none=True)
            t = time.perf_counter()
            joint_backward(model, batch, loss_fn, domain, chunk_size=len(batch["query_ids"]), use_mlm=use_mlm)
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--corpus-pairs", type=int, default=2000)
    args = ap.parse_args()
    path = SHARED / "biomed" / "biomed_title_abstract.jsonl"
    if not path.exists():
        sys.exit(f"{path} not found: this benchmark needs ../shared/data")
    recs = [json.loads(line) for line in open(path)]
    recs = [r for r in recs if r.get("title") and r.get("abstract")]
    texts = [t for r in recs[: args.corpus_pairs] for t in (r["title"], r["abstract"])]
    with tempfile.TemporaryDirectory() as tmp:
        report = build_expanded_model(OFFLINE_MODEL, texts, Path(tmp))
        domain = torch.tensor(json.loads((Path(tmp) / "domain_token_ids.json").read_text()))
        tok = AutoTokenizer.from_pretrained(tmp)
        pairs = [(r["title"], r["abstract"]) for r in recs[: args.batch]]
        domain_batch = PairCollator(tok, domain, generator=torch.Generator().manual_seed(0))(pairs)
        all_batch = PairCollator(tok, None, generator=torch.Generator().manual_seed(0))(pairs)
        model, _ = build_model(tmp)
        model.train()
        print(f"MiniLM after stage 1: |V| = {len(tok):,}, |V_D| = {report.tokens_added:,}; batch {args.batch}, "
              f"query/doc tokens {domain_batch['query_ids'].shape[1]}/{domain_batch['doc_ids'].shape[1]}, "
              f"{torch.get_num_threads()} threads, fp32")
        print(f"masked positions: domain {int((domain_batch['labels'] != IGNORE).sum())}, "
              f"all-token {int((all_batch['labels'] != IGNORE).sum())}")
        best = best_steps(model, {"contrastive": (domain_batch, domain, False),
                                  "joint": (domain_batch, domain, True),
                                  "all": (all_batch, None, True)}, args.steps)
        t_cl, t_joint, t_all = best["contrastive"], best["joint"], best["all"]
    print(f"contrastive only      {t_cl * 1000:8.0f} ms/step  (baseline)")
    print(f"joint, domain MLM     {t_joint * 1000:8.0f} ms/step  ratio {t_joint / t_cl:.2f} (target <= 1.15)")
    print(f"joint, all-token MLM  {t_all * 1000:8.0f} ms/step  ratio {t_all / t_cl:.2f}")


if __name__ == "__main__":
    main()
