"""Examples files: a pairs file or a data root converted once, streaming, into an Arrow file whose hard
negatives are row references (each document text held once), memory-mapped by a training stage."""

import json
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from mosaic_core.trainer import PairSet
from storage import schemas
from storage.examples import (
    LABELLED,
    SCHEMA,
    examples_file,
    map_examples,
    read_blocks,
    skipped_rows,
    whole,
    write_examples,
)
from storage.layout import DataLayout
from storage.manifest import Manifest, write_manifest
from storage.pairs_io import CorpusError, corpus_fingerprint
from storage.parquet import write_partition

DOCS = [f"abstract {i}: the kidney and the heart" for i in range(6)]
RECORDS = [
    {"title": "t0", "abstract": DOCS[0], "negative": DOCS[2], "negative_2": "a passage of no pair"},
    {"title": "t1", "abstract": DOCS[1], "negatives": [DOCS[0], 7, None, "a passage of no pair"]},
    {"title": "", "abstract": DOCS[3]},  # no usable query: skipped
    {"title": "t2", "abstract": DOCS[2], "negative": DOCS[5]},
    {"title": "t3", "abstract": 42},  # a number is no document: skipped
    {"title": "t4", "abstract": DOCS[4], "negatives": []},
    {"title": "t5", "abstract": DOCS[5], "negative": "another outside passage"},
    {"title": "t6", "abstract": DOCS[0]},  # a second pair with the first pair's document
]
EXAMPLES = [("t0", DOCS[0], DOCS[2], "a passage of no pair"), ("t1", DOCS[1], DOCS[0], "a passage of no pair"),
            ("t2", DOCS[2], DOCS[5]), ("t4", DOCS[4]), ("t5", DOCS[5], "another outside passage"), ("t6", DOCS[0])]
"""What the trainer read from RECORDS before: usable rows in file order, negative texts, non-texts left out."""


def jsonl(path, records, broken=True):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + ("{broken\n" if broken else ""))
    return path


def examples(path) -> list[tuple]:
    data = PairSet(map_examples(path))
    return [data.example(i) for i in range(len(data))]


def test_a_pairs_file_becomes_row_references_each_document_once(tmp_path):
    path = examples_file(str(jsonl(tmp_path / "pairs.jsonl", RECORDS)), "title", "abstract", tmp_path / "work")
    assert path.parent == tmp_path / "work" and path.suffix == ".arrow"
    assert examples(path) == EXAMPLES
    assert skipped_rows(path) == 3  # the broken line, the empty title, the numeric abstract
    table = map_examples(path)
    assert table.column("document").to_pylist() == [*(e[1] for e in EXAMPLES), "a passage of no pair",
                                                    "another outside passage"]
    assert table.column("query").to_pylist()[-2:] == [None, None]  # negatives of no pair: rows of their own
    # a negative that is a pair's document is that (first) pair's row; an outside text is stored once
    assert table.column("negatives").to_pylist()[:3] == [[2, 6], [0, 6], [4]]


def test_parquet_and_csv_files_give_the_same_examples(tmp_path):
    plain = [{"title": r["title"], "abstract": r["abstract"], "negative": r.get("negative")} for r in RECORDS
             if isinstance(r["abstract"], str) and r["title"]]
    want = [(r["title"], r["abstract"], *([r["negative"]] if r["negative"] else [])) for r in plain]
    pq.write_table(pa.Table.from_pylist(plain), tmp_path / "pairs.parquet")
    pacsv.write_csv(pa.Table.from_pylist(plain), tmp_path / "pairs.csv")
    for name in ("pairs.parquet", "pairs.csv"):
        assert examples(examples_file(str(tmp_path / name), "title", "abstract", tmp_path / "work")) == want, name
    with pytest.raises(CorpusError, match=r"pairs.csv: no column\(s\) \['body'\]"):
        examples_file(str(tmp_path / "pairs.csv"), "title", "body", tmp_path / "work")


def test_converted_once_rebuilt_when_the_file_changes_and_memory_mapped(tmp_path):
    records = [{"title": f"title {i}", "abstract": f"abstract {i} " + "text " * 200} for i in range(3000)]
    source = jsonl(tmp_path / "big.jsonl", records, broken=False)
    path = examples_file(str(source), "title", "abstract", tmp_path / "work")
    written = path.stat().st_mtime_ns
    assert examples_file(str(source), "title", "abstract", tmp_path / "work").stat().st_mtime_ns == written
    before = pa.total_allocated_bytes()
    data = PairSet(map_examples(path))
    assert data.example(2999) == ("title 2999", records[2999]["abstract"])
    assert path.stat().st_size > 3_000_000 and pa.total_allocated_bytes() - before < 100_000  # zero copy
    jsonl(source, records[:10], broken=False)
    assert len(PairSet(map_examples(examples_file(str(source), "title", "abstract", tmp_path / "work")))) == 10
    assert [b.num_rows for b in read_blocks(path, 4)] == [4, 4, 2]


def test_an_arrow_file_is_read_as_it_is_only_when_it_holds_examples(tmp_path):
    mined = examples_file(str(jsonl(tmp_path / "pairs.jsonl", RECORDS)), "title", "abstract", tmp_path / "work")
    assert examples_file(str(mined), "other", "columns", tmp_path / "elsewhere") == mined
    foreign = tmp_path / "foreign.arrow"
    with pa.OSFile(str(foreign), "wb") as sink, pa.ipc.new_file(sink, pa.schema([("x", pa.int64())])) as writer:
        writer.write_table(pa.table({"x": [1]}))
    with pytest.raises(CorpusError, match="foreign.arrow: an Arrow file, but not MOSAIC training examples"):
        examples_file(str(foreign), "query", "document", tmp_path / "work")


def filtered_root(root):
    """A data root after the filter: kept and dropped pairs of two files, hard negatives recorded as
    (file, pair id) of kept rows, of dropped rows, and of a row that does not exist."""
    layout = DataLayout(root)

    def ref(file, pid):
        return {"source_file": file, "pair_id": pid}

    rows = {
        "b": [("1", "qb1", "db1", True, [ref("a", "2"), ref("b", "2")]), ("2", "qb2", "db2", False, [])],
        "a": [("2", "qa2", "da2", True, [ref("b", "2"), ref("a", "9")]), ("10", "qa10", "da10", True, [ref("a", "2")]),
              ("3", "qa3", "da3", False, [])],
    }
    for file, pairs in rows.items():
        write_partition(layout.partition_path("filtered", file), schemas.FILTERED, [[
            {"pair_id": pid, "source_file": file, "query": q, "document": d, "kept": kept, "rank": 1, "cosine": 0.5,
             "chunk": 0, "negatives": negs} for pid, q, d, kept, negs in pairs]])
        write_manifest(layout, Manifest(stage="filter", partition=file, source="x", source_md5="m", file_seq=-1,
                                        config_hash="c", code_version="v", status="complete", records_in=2,
                                        rows_out=2, kept=1, dropped={}, outputs=[],
                                        started_at=datetime.now(timezone.utc)))
    return root


def test_a_filtered_data_root_gives_its_kept_pairs_in_order_with_referenced_negatives(tmp_path):
    root = filtered_root(tmp_path / "root")
    path = examples_file(str(root), "query", "document", tmp_path / "work")
    # ORDER BY source_file, pair_id (a string: "10" < "2"); a missing row is no negative
    assert examples(path) == [("qa10", "da10", "da2"), ("qa2", "da2", "db2"), ("qb1", "db1", "da2", "db2")]
    table = map_examples(path)
    assert table.column("document").to_pylist() == ["da10", "da2", "db1", "db2"]  # the dropped db2: once, no query
    assert table.column("negatives").to_pylist() == [[1], [3], [1, 3], []]


def test_a_filtered_data_roots_corpus_texts_stream_its_kept_pairs_in_order(tmp_path):
    from storage.pairs_io import iter_corpus_texts

    root = filtered_root(tmp_path / "root")
    assert list(iter_corpus_texts(str(root))) == ["qa10", "da10", "qa2", "da2", "qb1", "db1"]  # stage 1's corpus


def test_a_whole_examples_file_is_one_of_its_columns_written_from_its_fingerprint(tmp_path):
    rows = {"query": ["q"], "document": ["d"], "negatives": [[0]]}
    plain, labelled = tmp_path / "plain.arrow", tmp_path / "labelled.arrow"
    write_examples(plain, pa.table(rows, schema=SCHEMA).to_batches(), fingerprint="mined-a")
    write_examples(labelled, pa.table({**rows, "margins": [[1.5]]}, schema=LABELLED).to_batches(),
                   fingerprint="labels-a", schema=LABELLED)
    assert whole(plain) and whole(plain, fingerprint="mined-a") and not whole(plain, fingerprint="mined-b")
    assert whole(labelled, LABELLED, "labels-a") and not whole(plain, LABELLED) and not whole(labelled)
    assert map_examples(labelled).column("margins").to_pylist() == [[1.5]]
    plain.write_bytes(plain.read_bytes()[:64])  # cut short
    assert not whole(plain) and not whole(tmp_path / "missing.arrow")


def test_a_files_fingerprint_is_read_once_while_unchanged_and_again_once_it_changes(tmp_path, monkeypatch):
    import builtins

    path = tmp_path / "pairs.jsonl"
    path.write_text('{"query": "a", "document": "b"}\n')
    opened = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: opened.append(str(f)) or real_open(f, *a, **k))
    first = corpus_fingerprint(str(path))
    assert corpus_fingerprint(str(path)) == first and opened.count(str(path)) == 1
    path.write_text('{"query": "c", "document": "d"}\n')  # in place, the same size
    second = corpus_fingerprint(str(path))
    replaced = tmp_path / "new.jsonl"
    replaced.write_text('{"query": "e", "document": "f"}\n')
    replaced.replace(path)  # an atomic write: a new file under the old name
    assert len({first, second, corpus_fingerprint(str(path))}) == 3 and opened.count(str(path)) == 3  # one read each

