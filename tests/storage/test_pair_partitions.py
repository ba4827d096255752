"""A large pairs file is filtered in partitions of PARTITION_ROWS rows, streamed: the same rows, ids
and bad-row counts as one partition, each unreadable line counted once, in the partition it lies in."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from storage import pairs_io
from storage.pairs_io import list_pair_partitions, read_pair_partition


def _unruly_jsonl(path):
    lines = []
    for i in range(10):
        lines.append(json.dumps({"query": "" if i == 6 else f"q{i}", "document": f"d{i}"}).encode())
        if i in (1, 5):
            lines.append(b"{not json")
        if i == 8:
            lines.append(b'{"query": "bad \xff", "document": "x"}')
    path.write_bytes(b"\n".join(lines) + b"\n{broken at the end\n")
    return path


def _read_all(parts):
    rows = [read_pair_partition(p) for p in parts]
    bad: dict[str, int] = {}
    for r in rows:
        for k, v in r.bad.items():
            bad[k] = bad.get(k, 0) + v
    return [i for r in rows for i in r.pair_ids], [q for r in rows for q in r.queries], bad, rows


def test_a_large_file_is_split_into_partitions_that_read_as_the_whole_file(tmp_path, monkeypatch):
    path = _unruly_jsonl(tmp_path / "pairs.jsonl")
    (whole,) = list_pair_partitions(str(path))
    ids, queries, bad, _ = _read_all([whole])
    assert whole.name == "pairs" and whole.rows == 10 and ids == ["0", "1", "2", "3", "4", "5", "7", "8", "9"]
    assert bad == {"invalid_json": 3, "not_utf8": 1, "missing_query": 1, "missing_document": 0}
    monkeypatch.setattr(pairs_io, "STREAM_ROWS", 2)
    monkeypatch.setattr(pairs_io, "PARTITION_ROWS", 4)
    parts = list_pair_partitions(str(path))
    assert [(p.name, p.start, p.rows) for p in parts] == [("pairs-00000", 0, 4), ("pairs-00001", 4, 4),
                                                         ("pairs-00002", 8, 2)]
    assert len({p.checksum for p in parts}) == 3 and whole.checksum not in {p.checksum for p in parts}
    split_ids, split_queries, split_bad, rows = _read_all(parts)
    assert (split_ids, split_queries, split_bad) == (ids, queries, bad)
    # each unreadable line in its own partition: "{not json" after rows 1 and 5, the bad UTF-8 and
    # the broken last line after rows 8 and 9
    assert [(r.bad["invalid_json"], r.bad.get("not_utf8", 0), r.bad["missing_query"]) for r in rows] == \
        [(1, 0, 0), (1, 0, 1), (1, 1, 0)]


def test_a_parquet_file_is_split_too_and_its_ids_kept(tmp_path, monkeypatch):
    path = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"query": [f"q{i}" for i in range(7)], "document": [f"d{i}" for i in range(7)],
                             "id": [f"p{i}" for i in range(7)]}), path, row_group_size=3)
    monkeypatch.setattr(pairs_io, "STREAM_ROWS", 2)
    monkeypatch.setattr(pairs_io, "PARTITION_ROWS", 4)
    ids, queries, bad, _ = _read_all(list_pair_partitions(str(path)))
    assert ids == [f"p{i}" for i in range(7)] and queries == [f"q{i}" for i in range(7)]
    assert bad == {"invalid_json": 0, "missing_query": 0, "missing_document": 0}
