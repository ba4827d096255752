"""The low-resource recipe's candidate pairs: Qur'an verses linked by Tafsir Ibn Kathir.

A commentary block on verses ``s:a–b`` that cites ``(x:y)`` or ``(x:y-z)`` links each
commented verse (the query) to each cited verse (the passage). Texts are the Sahih
International translation. Self-links (a cited verse inside the commented range) and
duplicates are dropped; citations of verses that do not exist are counted and reported.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

Verse = tuple[int, int]
_REF = re.compile(r"\((\d{1,3}):(\d{1,3})(?:\s*[-–]\s*(\d{1,3}))?\)")


def read_quran(path: str | Path) -> dict[Verse, str]:
    """``sura|aya|text`` lines (Tanzil format) → {(sura, aya): text}."""
    verses: dict[Verse, str] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("|", 2)
            if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
                raise ValueError(f"{path}:{lineno}: expected 'sura|aya|text', got {line[:60]!r}")
            verses[(int(parts[0]), int(parts[1]))] = parts[2].strip()
    return verses


@dataclass
class CandidateStats:
    blocks: int = 0
    references: int = 0
    invalid_references: int = 0
    self_links: int = 0
    duplicates: int = 0
    candidates: int = 0
    invalid_examples: list[str] = field(default_factory=list)


def tafsir_candidates(tafsir_jsonl: str | Path, verses: dict[Verse, str]) -> tuple[list[dict], CandidateStats]:
    """Candidate (commented verse, cited verse) pairs in first-seen order, with counts."""
    stats, seen, pairs = CandidateStats(), set(), []
    with open(tafsir_jsonl, encoding="utf-8") as fh:
        for line in fh:
            block = json.loads(line)
            stats.blocks += 1
            sura = int(block["surah"])
            commented = [(sura, a) for a in range(int(block["ayah_start"]), int(block["ayah_end"]) + 1)]
            for x, y, z in _REF.findall(block["text"]):
                stats.references += 1
                first, last = int(y), int(z) if z else int(y)
                cited = [(int(x), a) for a in range(first, last + 1)]
                if last < first or not all(c in verses for c in cited):
                    stats.invalid_references += 1
                    if len(stats.invalid_examples) < 10:
                        stats.invalid_examples.append(f"block {block.get('id')}: ({x}:{y}{'-' + z if z else ''})")
                    continue
                for v in commented:
                    for c in cited:
                        if c == v:
                            stats.self_links += 1
                        elif (v, c) in seen:
                            stats.duplicates += 1
                        else:
                            seen.add((v, c))
                            pairs.append({"id": f"{v[0]}:{v[1]}->{c[0]}:{c[1]}", "query": verses[v],
                                          "document": verses[c], "query_verse": f"{v[0]}:{v[1]}",
                                          "cited_verse": f"{c[0]}:{c[1]}"})
    stats.candidates = len(pairs)
    return pairs, stats
