"""Write the example's docstrings as a folder of text files, one document each: the first line
its title (``module.name: first sentence``), the rest its text. A domain that has documents but
no pairs starts from such a folder (docs/tutorials/documents.md).

Run from anywhere: ``python docs/examples/python-docs/make_documents.py [--out FOLDER]``
(default: ``documents/`` beside this file); it reads ``pairs.jsonl`` beside it.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "documents", help="The folder to write (created).")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    with (HERE / "pairs.jsonl").open() as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    for i, row in enumerate(rows):
        name = re.sub(r"[^A-Za-z0-9_.]+", "-", row["title"].split(":")[0])[:60]
        (out / f"{i:04d}-{name}.txt").write_text(f"{row['title']}\n{row['body']}\n", encoding="utf-8")
    print(f"{len(rows)} documents written to {out}")


if __name__ == "__main__":
    main()
