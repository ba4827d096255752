"""The demo as a stream of updates (issue 66): a baseline, then update files in which new invented
words appear over time, each parsed by the PubMed parser, and a task and glossary over every word."""

from __future__ import annotations

import json

import pytest

from mosaic_core.data.demo import NEW_WORDS, WORDS, make_demo, make_stream
from mosaic_core.data.pubmed import Citation, iter_citations
from storage.demo import write_stream
from storage.sources import list_source

TICKS = 10


@pytest.fixture(scope="module")
def stream():
    return make_stream(seed=0, ticks=TICKS)


def citations(tmp_path, name: str, data: bytes) -> list[Citation]:
    path = tmp_path / name.replace("/", "-")
    path.write_bytes(data)
    return [c for c in iter_citations(path) if isinstance(c, Citation)]


def texts(tmp_path, name: str, data: bytes) -> str:
    return " ".join(f"{c.title} {' '.join(c.abstract_sections)}" for c in citations(tmp_path, name, data)).lower()


def test_the_stream_is_a_function_of_its_seed(stream):
    again = make_stream(seed=0, ticks=TICKS)
    assert again.files == stream.files
    assert (again.corpus, again.queries, again.qrels, again.introduced) == (stream.corpus, stream.queries,
                                                                             stream.qrels, stream.introduced)
    assert make_stream(seed=1, ticks=TICKS).files != stream.files


def test_the_baseline_is_the_demos_and_an_update_the_same_for_any_number_of_ticks(stream):
    demo = make_demo(seed=0)
    baseline = {n: d for n, d in stream.files.items() if n.startswith("baseline/")}
    assert baseline == {n: d for n, d in demo.files.items() if n.startswith("baseline/")}
    short = make_stream(seed=0, ticks=3)
    assert short.files == {n: d for n, d in stream.files.items() if n in short.files}
    assert short.updates == stream.updates[:3]


def test_update_files_follow_ncbi_numbering_with_md5_sidecars(stream):
    assert stream.updates == [f"updatefiles/pubmed26n{k + 2:04d}.xml" for k in range(1, TICKS + 1)]
    for name in stream.updates:
        assert f"{name}.md5" in stream.files


def test_every_update_parses_and_holds_about_share_of_the_baseline(stream, tmp_path):
    baseline = sum(len(citations(tmp_path, n, d)) for n, d in stream.files.items()
                   if n.startswith("baseline/") and n.endswith(".xml"))
    pmids = set()
    for name in stream.updates:
        found = citations(tmp_path, name, stream.files[name])
        assert abs(len(found) - 0.05 * baseline) <= 1, name
        pmids |= {c.pmid for c in found}
    assert len(pmids) == TICKS * round(0.05 * baseline)  # no PMID twice across the updates
    small = make_stream(seed=0, ticks=2, share=0.02)
    for name in small.updates:
        assert abs(len(citations(tmp_path, name, small.files[name])) - 0.02 * baseline) <= 1


def test_a_new_word_never_appears_before_its_tick_and_appears_in_its_ticks_file(stream, tmp_path):
    baseline = " ".join(texts(tmp_path, n, d) for n, d in stream.files.items()
                        if n.startswith("baseline/") and n.endswith(".xml"))
    updates = [texts(tmp_path, n, stream.files[n]) for n in stream.updates]
    for word in NEW_WORDS:
        tick = stream.introduced[word]
        assert word not in baseline
        for k, text in enumerate(updates, start=1):
            if k < tick:
                assert word not in text, (word, k)
        assert updates[tick - 1].count(word) >= 8, word  # explained and twin citations


def test_the_introduced_map_glossary_and_task_cover_every_word(stream):
    assert stream.introduced == {**dict.fromkeys(WORDS, 0), **{w: k for k, w in enumerate(NEW_WORDS, start=1)}}
    assert sorted(e["term"] for e in stream.glossary) == sorted(stream.introduced)
    assert all(e["definition"] for e in stream.glossary)
    assert {q.rsplit("-q", 1)[0] for q in stream.queries} == set(stream.introduced)
    assert set(stream.qrels) == set(stream.queries)
    # a new word's meaning is its own among its organ's words
    by_organ = {}
    for t in stream.terms:
        by_organ.setdefault(t.organ, []).append((t.action, t.target))
    assert all(len(set(m)) == len(m) for m in by_organ.values())


def test_fewer_ticks_introduce_fewer_words():
    short = make_stream(seed=0, ticks=3)
    assert {w for w, k in short.introduced.items() if k} == set(NEW_WORDS[:3])
    assert len(short.glossary) == len(WORDS) + 3
    with pytest.raises(ValueError, match="ticks"):
        make_stream(seed=0, ticks=0)


def test_write_stream_lays_out_a_pubmed_snapshot_the_local_source_lists_in_order(stream, tmp_path):
    paths = write_stream(tmp_path / "s", stream)
    files = list_source(str(tmp_path / "s"))
    assert [f.name for f in files] == ["pubmed26n0001.xml", "pubmed26n0002.xml",
                                       *(n.split("/")[1] for n in stream.updates)]
    assert json.loads(paths["introduced"].read_text()) == stream.introduced
    assert [json.loads(line) for line in paths["glossary"].read_text().splitlines()] == stream.glossary
    assert (paths["task"] / "qrels" / "test.tsv").is_file()
    mtime = paths["glossary"].stat().st_mtime_ns
    write_stream(tmp_path / "s", stream)  # idempotent: unchanged files are not rewritten
    assert paths["glossary"].stat().st_mtime_ns == mtime
