"""What some of stage 1's new tokens cost: a copy of a stage-1 model whose tokenizer no longer
writes them (each such word read as the base tokenizer's pieces again, every row unchanged),
scored beside the model itself by `mosaic eval`.

    python bench/tokens_off.py STAGE1 OUT (--glossary | --tokens FILE) -- [mosaic eval options]

    # the glossary tokens of the real pairs' MeSH run (docs/results.md, 2026-12-08):
    python bench/tokens_off.py /work/runs/glossary/real-with/models/stage1 /work/runs/tokens-off --glossary \\
        -- --heldout /work/runs/glossary/real-with --beir ../shared/data/scifact

``--glossary``: the tokens the model's vocabulary report lists as glossary terms it added;
``--tokens FILE``: one token per line. The copy is written to ``OUT/model`` (the weights copied,
the tokenizer rewritten without those tokens: its WordPiece vocabulary keeps every other id), and
`mosaic eval --model stage1=STAGE1 --model off=OUT/model --out OUT/eval` is run with the options
after ``--``: its report gives the paired differences, off against stage 1, per query.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def glossary_tokens(model: Path) -> list[str]:
    report = json.loads((model / "vocab_report.json").read_text())
    return [a["token"] for a in (report.get("glossary") or {}).get("added") or []]


def without(model: Path, out: Path, tokens: set[str]) -> int:
    """Write ``out``: ``model`` with a tokenizer that has none of ``tokens``; how many it dropped."""
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    if tokenizer["model"]["type"] != "WordPiece":
        sys.exit(f"{model}: a {tokenizer['model']['type']} tokenizer; this script rewrites WordPiece vocabularies only")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(model, out, ignore=shutil.ignore_patterns("tb", "tokenizer.json"))
    vocab = tokenizer["model"]["vocab"]
    dropped = [t for t in tokens if vocab.pop(t, None) is not None]
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    return len(dropped)


def main() -> None:
    argv = sys.argv[1:]
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage1", type=Path)
    parser.add_argument("out", type=Path)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--glossary", action="store_true", help="the glossary tokens its vocabulary report lists")
    which.add_argument("--tokens", type=Path, help="a file of tokens, one per line")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    tokens = set(glossary_tokens(args.stage1) if args.glossary else args.tokens.read_text().split())
    print(f"{without(args.stage1, args.out / 'model', tokens)} of {len(tokens)} tokens taken out", flush=True)
    subprocess.run([sys.executable, "-m", "cli", "eval", "--model", f"stage1={args.stage1}",
                    "--model", f"off={args.out / 'model'}", "--out", str(args.out / "eval"), *rest],
                   cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
