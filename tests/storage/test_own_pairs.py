"""A user's own pairs, in every format they keep them in, read in batches to the same rows."""

import gzip
import json

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from storage import own_pairs
from storage.own_pairs import check_own_pairs, content_hash, iter_pairs
from storage.pairs_io import CorpusError

ROWS = [{"heading": f"clause {i} on termination", "clause": f"Either party may end this agreement, clause {i}, "
         "with thirty days of written notice to the other party.", "id": i} for i in range(25)]
EXPECTED = [(r["heading"], r["clause"]) for r in ROWS]


def write_all_formats(folder):
    folder.mkdir()
    table = pa.Table.from_pylist(ROWS)
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (folder / "b.json").write_text(json.dumps(ROWS))
    pq.write_table(table, folder / "c.parquet", row_group_size=7)
    pacsv.write_csv(table, folder / "d.csv")
    with gzip.open(folder / "e.csv.gz", "wb") as fh:
        pacsv.write_csv(table, fh)
    pacsv.write_csv(table, folder / "f.tsv", pacsv.WriteOptions(delimiter="\t"))
    return folder


def read(source, base=None):
    files = check_own_pairs(source, "heading", "clause", base)
    bad = {}
    rows = [pair for batch in iter_pairs(files, "heading", "clause", bad) for pair in batch]
    return files, rows, bad


def test_every_format_reads_to_the_same_rows_in_batches(tmp_path, monkeypatch):
    folder = write_all_formats(tmp_path / "pairs")
    monkeypatch.setattr(own_pairs, "BATCH_ROWS", 4)  # several batches per file
    for name in ("a.jsonl", "b.json", "c.parquet", "d.csv", "e.csv.gz", "f.tsv"):
        _, rows, bad = read(str(folder / name))
        assert rows == EXPECTED and not bad, name
    files, rows, _ = read(str(folder))  # a folder: every file, in name order
    assert [f.name for f in files] == ["a.jsonl", "b.json", "c.parquet", "d.csv", "e.csv.gz", "f.tsv"]
    assert rows == EXPECTED * 6
    assert read("pairs/*.parquet", base=tmp_path)[1] == EXPECTED  # a glob, relative to a config's folder


def test_a_hugging_face_save_to_disk_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "hf"))
    files, rows, _ = read(str(tmp_path / "hf"))
    assert all(f.suffix == ".arrow" for f in files) and rows == EXPECTED


def test_what_is_wrong_with_a_source_is_said_before_any_work(tmp_path):
    folder = write_all_formats(tmp_path / "pairs")
    with pytest.raises(CorpusError, match=r"no column 'titel'; it has \['clause', 'heading', 'id'\]"):
        check_own_pairs(str(folder / "c.parquet"), "titel", "clause")
    with pytest.raises(CorpusError, match="paths are relative to"):
        check_own_pairs("missing.jsonl", "heading", "clause", base=tmp_path)
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(CorpusError, match="broken.parquet: cannot be read as parquet"):
        check_own_pairs(str(tmp_path / "broken.parquet"), "heading", "clause")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match="holds no pairs file"):
        check_own_pairs(str(tmp_path / "empty"), "heading", "clause")


def test_unreadable_jsonl_lines_are_counted_and_the_content_hash_follows_the_bytes(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"heading": "a b", "clause": "c d"}\nnot json\n\xff\xfe{"heading": 1}\n')
    _, rows, bad = read(str(path))
    assert rows == [("a b", "c d")] and bad == {"invalid_json": 1, "not_utf8": 1}
    before = content_hash([path])
    path.write_bytes(path.read_bytes() + b'{"heading": "e", "clause": "f"}\n')
    assert content_hash([path]) != before


def _hub_cache(cache, repo, files):
    """A dataset in the hub's cache as huggingface_hub lays it out: snapshot entries are links
    to blobs named by their hash (no suffix), a ref names the snapshot."""
    folder = cache / f"datasets--{repo.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    (folder / "blobs").mkdir()
    for name, data in files.items():
        blob = folder / "blobs" / f"blob{len(list((folder / 'blobs').iterdir()))}"
        blob.write_bytes(data)
        link = folder / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(blob)


def test_a_hub_dataset_is_read_from_the_hub_cache_when_the_hub_is_out_of_reach(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    table = pa.Table.from_pylist(ROWS)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    _hub_cache(tmp_path / "hub", "acme/clauses", {"data/train-00000.parquet": sink.getvalue().to_pybytes(),
                                                  "data/test.jsonl": b"".join(json.dumps(r).encode() + b"\n"
                                                                              for r in ROWS[:5]),
                                                  "README.md": b"# clauses"})
    for source in ("acme/clauses", "hf://datasets/acme/clauses"):
        files, rows, bad = read(source)
        assert [f.name for f in files] == ["test.jsonl", "train-00000.parquet"]  # linked blobs keep their names
        assert rows == EXPECTED[:5] + EXPECTED and not bad
    files, rows, _ = read("hf://datasets/acme/clauses/data/train-*.parquet")  # a glob inside the dataset
    assert [f.name for f in files] == ["train-00000.parquet"] and rows == EXPECTED
    assert own_pairs.locate("acme/clauses", tmp_path) == "acme/clauses"  # no such local path: the hub's
    (tmp_path / "acme" / "clauses").mkdir(parents=True)
    assert own_pairs.locate("acme/clauses", tmp_path) == str(tmp_path / "acme" / "clauses")  # a local path wins
    with pytest.raises(CorpusError, match="hub could not be reached with no copy"):
        read("acme/contracts")
    with pytest.raises(CorpusError, match="no such file, folder or glob"):
        read("acme/clauses.jsonl")  # a pairs file's name is a missing file, not a hub dataset


def test_compressed_json_lines_and_arrays_read_like_plain_ones(tmp_path):
    import bz2

    lines = "".join(json.dumps(r) + "\n" for r in ROWS).encode()
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(lines))
    (tmp_path / "b.jsonl.bz2").write_bytes(bz2.compress(lines))
    (tmp_path / "c.json.gz").write_bytes(gzip.compress(json.dumps(ROWS).encode()))
    for name in ("a.jsonl.gz", "b.jsonl.bz2", "c.json.gz"):
        _, rows, bad = read(str(tmp_path / name))
        assert rows == EXPECTED and not bad, name
