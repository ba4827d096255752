"""What labelling hard negatives with a teacher cross-encoder costs (MarginMSE's labels,
``tasks/margins.py``): pairs of the real biomedical set mined for one hard negative each with
the offline MiniLM, then labelled by a cross-encoder of cross-encoder/ms-marco-MiniLM-L-6-v2's
shape (6 layers, hidden 384: the offline MiniLM's weights under a random one-logit head, since no
trained cross-encoder installs offline; the time is the architecture's, the margins mean nothing).

    python bench/margins.py [--pairs FILE] [--n 2000] [--teacher DIR] [--out DIR]

Prints the mining and labelling time, the teacher's scored (query, document) pairs per second,
the margins' spread and the process's peak RSS, with the machine. ``--teacher`` labels with a
real cross-encoder folder instead (its margins then mean something: their share above zero is
how often the teacher ranks the pair's document above the mined negative).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mosaic_core.modeling.refs import OFFLINE_MODEL  # noqa: E402

PAIRS = ROOT.parent / "shared" / "data" / "biomed" / "biomed_title_abstract.jsonl"


def offline_cross_encoder(out: Path) -> str:
    """The offline MiniLM's encoder under a random one-logit classification head, saved to ``out``."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from mosaic_core.modeling.refs import resolve_model

    source = resolve_model(OFFLINE_MODEL)
    model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=1)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return str(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=Path, default=PAIRS)
    parser.add_argument("--query-column", default="title")
    parser.add_argument("--document-column", default="abstract")
    parser.add_argument("--n", type=int, default=2000, help="Pairs taken from the top of --pairs.")
    parser.add_argument("--teacher", default=None,
                        help="A cross-encoder folder (default: MiniLM's shape, random head).")
    parser.add_argument("--out", type=Path, default=None, help="Work folder (default: a temporary one).")
    args = parser.parse_args()

    import numpy as np
    import torch

    from bench.machine import cpu_name
    from storage.examples import map_examples
    from tasks.margins import with_margins
    from tasks.negatives import with_hard_negatives

    work = args.out or Path(tempfile.mkdtemp(prefix="margins-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    pairs = work / "pairs.jsonl"
    with open(args.pairs) as src, open(pairs, "w") as dst:
        for _, line in zip(range(args.n), src, strict=False):
            row = json.loads(line)
            dst.write(json.dumps({"query": row[args.query_column], "document": row[args.document_column]}) + "\n")
    teacher = args.teacher or offline_cross_encoder(work / "teacher")
    print(f"{cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}; {args.n:,} pairs of "
          f"{args.pairs.name}; teacher {'MiniLM-L6 shape, random head' if args.teacher is None else teacher}")
    started = time.perf_counter()
    mined = with_hard_negatives.fn(str(pairs), OFFLINE_MODEL, "query", "document", 1, (64, 256),
                                   str(work / "mined.arrow"), str(work / "examples"))
    mining = time.perf_counter() - started
    started = time.perf_counter()
    out = with_margins.fn(mined, teacher, "query", "document", 1, (0, 0), str(work / "margins.arrow"),
                          str(work / "examples"))
    labelling = time.perf_counter() - started
    rows = [np.array(r, dtype=np.float64) for r in map_examples(Path(out)).column("margins").to_pylist()]
    labelled = [r[~np.isnan(r)] for r in rows]
    margins = np.concatenate(labelled)
    scored = len(margins) + sum(1 for r in labelled if len(r))  # each labelled negative, and its pair once
    print(f"mining: {mining:.0f} s; labelling: {labelling:.0f} s for {scored:,} scored pairs ({len(margins):,} "
          f"negatives and their positives), {scored / labelling:.1f} pairs/s")
    print(f"margins: mean {margins.mean():.3f}, std {margins.std():.3f}, {100 * float(np.mean(margins > 0)):.1f}% "
          f"above zero; peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
