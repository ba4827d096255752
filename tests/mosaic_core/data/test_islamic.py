import json

import pytest
from builders import shared_data

from mosaic_core.data.islamic import read_quran, tafsir_candidates


def write(tmp_path):
    quran = tmp_path / "q.txt"
    quran.write_text("1|1|First verse.\n1|2|Second verse.\n2|1|Other sura one.\n2|2|Other sura two.\n2|3|Three.\n")
    tafsir = tmp_path / "t.jsonl"
    blocks = [
        {"id": "1:1-2", "surah": 1, "ayah_start": 1, "ayah_end": 2,
         "text": "Compare (2:1-2) and again (2:1), see (1:2), and (9:99) which does not exist."},
        {"id": "2:3-3", "surah": 2, "ayah_start": 3, "ayah_end": 3, "text": "As in (1:1)."},
    ]
    tafsir.write_text("".join(json.dumps(b) + "\n" for b in blocks))
    return quran, tafsir


def test_candidates_from_references(tmp_path):
    quran, tafsir = write(tmp_path)
    pairs, stats = tafsir_candidates(tafsir, read_quran(quran))
    ids = [p["id"] for p in pairs]
    assert ids == ["1:1->2:1", "1:1->2:2", "1:2->2:1", "1:2->2:2", "1:1->1:2", "2:3->1:1"]
    assert pairs[0]["query"] == "First verse." and pairs[0]["document"] == "Other sura one."
    assert (stats.blocks, stats.references, stats.invalid_references) == (2, 5, 1)
    assert stats.self_links == 1 and stats.duplicates == 2 and stats.candidates == 6
    assert "(9:99)" in stats.invalid_examples[0]


def test_bad_quran_line_is_named(tmp_path):
    bad = tmp_path / "q.txt"
    bad.write_text("1|1|ok\nnot a verse line\n")
    with pytest.raises(ValueError, match="q.txt:2"):
        read_quran(bad)


def test_real_tafsir_counts():
    quran = read_quran(shared_data("islamic", "quran_en_sahih.txt"))
    assert len(quran) == 6236
    pairs, stats = tafsir_candidates(shared_data("islamic", "tafsir_ibn_kathir_en.grouped.jsonl"), quran)
    assert stats.blocks == 2696 and stats.references == 4639
    assert stats.candidates == len(pairs) == 15306
    assert len({p["id"] for p in pairs}) == len(pairs)
