"""Build docs/examples/python-docs/pairs.jsonl from the docstrings of Python's standard library.

Each pair is one public function, class or method of a fixed list of standard-library modules:

* ``title``: ``"module.name: first sentence of the docstring"``, a short query-like text;
* ``body``: the rest of the docstring, whitespace collapsed (at least 15 words).

The output is deterministic for a given Python version: pairs are sorted by qualified name,
duplicated bodies are dropped, and if there are more than ``MAX_PAIRS`` every k-th pair is kept
so that the sample spreads over all modules.

Run from anywhere: ``python docs/examples/python-docs/make_pairs.py [--out PATH]``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import re
import sys
from pathlib import Path

MODULES = (
    "argparse", "base64", "bisect", "calendar", "collections", "copy", "csv", "dataclasses",
    "datetime", "decimal", "difflib", "enum", "fnmatch", "fractions", "functools", "glob", "gzip",
    "hashlib", "heapq", "html", "inspect", "itertools", "json", "logging", "math", "os.path",
    "pathlib", "pprint", "queue", "random", "re", "shutil", "sqlite3", "statistics", "string",
    "struct", "subprocess", "tarfile", "tempfile", "textwrap", "threading", "typing",
    "urllib.parse", "uuid", "zipfile",
)
MIN_BODY_WORDS = 15
MAX_PAIRS = 600
OUT = Path(__file__).resolve().parent / "pairs.jsonl"

# A sentence ends at ., ! or ? followed by whitespace, but not in "e.g. ", "i.e. ", "eg. " or "...".
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\beg)(?<!\.)[.!?](?=\s|$)")
# A C function's hand-written signature line, e.g. "pack_into(format, buffer, offset, v1, v2, ...)"
# or "islice(iterable, stop) --> islice object".
_SIGNATURE_LINE = re.compile(r"^[A-Za-z_][\w.]*\(.*\)(\s*-+>.*)?$")


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _split_docstring(doc: str) -> tuple[str, str] | None:
    """(first sentence, rest) of a docstring, or None when it has no short first sentence.

    The first sentence is looked for in the first paragraph only; a paragraph with no sentence
    end (a summary line without a full stop) is the first sentence as a whole."""
    lines = inspect.cleandoc(doc).splitlines()
    while lines and _SIGNATURE_LINE.match(lines[0].strip()):
        lines = lines[1:]
    paragraphs = [p for p in re.split(r"\n\s*\n", "\n".join(lines).strip()) if p.strip()]
    if not paragraphs:
        return None
    head = _collapse(paragraphs[0])
    match = _SENTENCE_END.search(head)
    first, rest = (head[: match.end()], head[match.end():]) if match else (head, "")
    first = first.strip()
    if not first or len(first.split()) > 40:
        return None
    return first, _collapse(" ".join([rest, *paragraphs[1:]]))


def _defined_in(obj: object, module_name: str) -> bool:
    """Whether ``obj`` belongs to ``module_name`` (or its private C accelerator, e.g. _json), for
    modules without ``__all__``."""
    owner = getattr(obj, "__module__", None)
    if owner is None:
        return True  # builtin methods and some C objects carry no module
    base = module_name.split(".")[-1]
    return owner in (module_name, "_" + base, "_" + module_name) or owner.startswith(module_name + ".")


def _members(module_name: str):
    """Yield (qualified name, object) for the public functions, classes and methods of a module."""
    module = importlib.import_module(module_name)
    public = getattr(module, "__all__", None)
    for name in sorted(vars(module)):
        if name.startswith("_") or (public is not None and name not in public):
            continue
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        if getattr(obj, "__module__", None) == "builtins" or getattr(obj, "__name__", name) != name:
            continue  # an alias or a re-exported builtin (typing.Text is str), not this module's own
        if public is None and not _defined_in(obj, module.__name__):
            continue  # without __all__, keep only what the module itself defines
        yield f"{module_name}.{name}", obj
        if inspect.isclass(obj):
            for attr in sorted(vars(obj)):
                if attr.startswith("_"):
                    continue
                member = inspect.getattr_static(obj, attr)
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if inspect.isroutine(member):
                    yield f"{module_name}.{name}.{attr}", member


def build_pairs() -> list[dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for module_name in MODULES:
        try:
            members = list(_members(module_name))
        except Exception as exc:  # noqa: BLE001 - a module missing from this build is skipped
            print(f"skipping {module_name}: {exc}", file=sys.stderr)
            continue
        for qualname, obj in members:
            # The object's own docstring, never one inherited from a base class.
            doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
            if not isinstance(doc, str):
                continue
            split = _split_docstring(doc)
            if split is None:
                continue
            first, body = split
            if len(body.split()) < MIN_BODY_WORDS:
                continue
            found.setdefault(qualname, {"title": f"{qualname}: {first}", "body": body})
    pairs, seen = [], set()
    for qualname in sorted(found):
        pair = found[qualname]
        if pair["body"] in seen:
            continue
        seen.add(pair["body"])
        pairs.append(pair)
    if len(pairs) > MAX_PAIRS:
        step = -(-len(pairs) // MAX_PAIRS)  # ceil: every k-th pair, at most MAX_PAIRS of them
        pairs = pairs[::step]
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"output JSONL (default: {OUT})")
    args = parser.parse_args()
    pairs = build_pairs()
    with args.out.open("w", encoding="utf-8") as handle:
        for pair in pairs:
            handle.write(json.dumps(pair, ensure_ascii=False) + "\n")
    print(f"wrote {len(pairs)} pairs to {args.out} (Python {sys.version.split()[0]})", file=sys.stderr)


if __name__ == "__main__":
    main()
