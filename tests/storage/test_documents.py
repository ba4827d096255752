"""A domain's documents, in every format they are kept in, streamed to (doc_id, title, text); bad
records counted, unusable sources named; built pairs written atomically."""

import gzip
import json
import logging

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from storage import own_pairs
from storage.documents import DocumentStats, check_documents, iter_documents, write_pairs
from storage.pairs_io import CorpusError

ROWS = [{"id": f"d{i}", "title": f"Notice period {i}", "text": f"Either party may end clause {i}. It takes thirty "
         "days of written notice."} for i in range(12)]


def read(source, base=None, **kw):
    files = check_documents(source, "text", base)
    stats = DocumentStats()
    batches = list(iter_documents(files, stats=stats, **kw))
    return files, [d for b in batches for d in b], stats, batches


def test_every_structured_format_reads_to_the_same_documents(tmp_path, monkeypatch):
    folder = tmp_path / "docs"
    folder.mkdir()
    table = pa.Table.from_pylist(ROWS)
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (folder / "b.json").write_text(json.dumps(ROWS))
    pq.write_table(table, folder / "c.parquet", row_group_size=5)
    pacsv.write_csv(table, folder / "d.csv")
    pacsv.write_csv(table, folder / "e.tsv", pacsv.WriteOptions(delimiter="\t"))
    with gzip.open(folder / "f.jsonl.gz", "wt") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in ROWS))
    with gzip.open(folder / "g.csv.gz", "wb") as fh:
        pacsv.write_csv(table, fh)
    expected = [(r["id"], r["title"], r["text"]) for r in ROWS]
    monkeypatch.setattr(own_pairs, "BATCH_ROWS", 4)  # several reader batches per file
    for name in ("a.jsonl", "b.json", "c.parquet", "d.csv", "e.tsv", "f.jsonl.gz", "g.csv.gz"):
        _, docs, stats, _ = read(str(folder / name))
        assert docs == expected and stats.as_dict() == {"files": 1, "documents": 12, "skipped": {}}, name
    files, docs, stats, batches = read(str(folder), batch_size=5)  # a folder: every file, in name order
    assert len(files) == 7 and docs == expected * 7 and stats.documents == 84
    assert [len(b) for b in batches] == [5] * 16 + [4]  # batches span files
    assert read("docs/*.parquet", base=tmp_path)[1] == expected  # a glob, relative to a config's folder


def test_without_id_or_title_columns_a_document_is_named_by_its_file_and_row(tmp_path):
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.Table.from_pylist([{"body": "one two three"}, {"body": "four five"}]), path)
    files = check_documents(str(path), "body")
    docs = [d for b in iter_documents(files, "body") for d in b]
    assert docs == [("plain.parquet:1", None, "one two three"), ("plain.parquet:2", None, "four five")]
    docs = [d for b in iter_documents(files, "body", title_column=None, id_column=None) for d in b]
    assert [d[0] for d in docs] == ["plain.parquet:1", "plain.parquet:2"]


def test_a_folder_of_text_files_one_document_each(tmp_path):
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("Termination rules\nEither party may end it. Notice is due.\n")
    (folder / "sub" / "b.md").write_text("# Payment terms\n\nInvoices are due in thirty days.\n")
    (folder / "c.txt").write_text("   \n\n")  # blank: skipped, counted
    (folder / "d.txt").write_bytes(b"\xff\xfe not utf-8")
    with gzip.open(folder / "e.txt.gz", "wt") as fh:
        fh.write("Compressed title\nA compressed document body.")
    (folder / "ignored.xml").write_text("<not a document/>")
    files, docs, stats, _ = read(str(folder))
    assert [f.name for f in files] == ["a.txt", "c.txt", "d.txt", "e.txt.gz", "b.md"]
    assert docs == [("a.txt", None, "Termination rules\nEither party may end it. Notice is due.\n"),
                    ("e.txt.gz", None, "Compressed title\nA compressed document body."),
                    ("sub/b.md", None, "# Payment terms\n\nInvoices are due in thirty days.\n")]
    assert stats.skipped == {"empty_text": 1, "not_utf8": 1}
    _, docs, _, _ = read(str(folder), title_from_first_line=True)
    assert [(d[1], d[2].strip()) for d in docs] == [
        ("Termination rules", "Either party may end it. Notice is due."),
        ("Compressed title", "A compressed document body."),
        ("Payment terms", "Invoices are due in thirty days.")]


def test_records_without_usable_text_are_counted_and_logged(tmp_path, caplog):
    path = tmp_path / "d.jsonl"
    lines = [json.dumps({"id": 1, "text": "kept one"}), json.dumps({"id": 2, "text": ""}),
             json.dumps({"id": 3, "text": None}), json.dumps({"id": 4}), json.dumps({"id": 5, "text": 7}),
             "not json", json.dumps({"id": 6, "text": "kept two", "title": 3})]
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="storage.documents"):
        _, docs, stats, _ = read(str(path))
    assert docs == [("1", None, "kept one"), ("6", None, "kept two")]  # a title that is no text is no title
    assert stats.skipped == {"empty_text": 1, "missing_text": 2, "non_text": 1, "invalid_json": 1}
    assert "skipped 5 record(s)" in caplog.text and str(path) in caplog.text


def test_max_documents_stops_reading(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    _, docs, stats, batches = read(str(path), max_documents=5, batch_size=2)
    assert [d[0] for d in docs] == ["d0", "d1", "d2", "d3", "d4"] and stats.documents == 5
    assert [len(b) for b in batches] == [2, 2, 1]


def test_unusable_sources_are_errors_that_name_the_file_and_what_to_do(tmp_path):
    with pytest.raises(CorpusError, match=r"source.path 'missing': no such file, folder or glob \(paths are "
                       "relative to"):
        check_documents("missing", base=tmp_path)
    with pytest.raises(CorpusError, match="source.path 'notes/a.txt': no such file"):
        check_documents("notes/a.txt", base=tmp_path)  # a text file's name is a missing file, not a hub dataset
    assert own_pairs.locate("notes/a.txt", tmp_path, text=True) == str(tmp_path / "notes" / "a.txt")
    assert own_pairs.locate("acme/notes", tmp_path, text=True) == "acme/notes"
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([{"body": "x", "name": "y"}]), path)
    with pytest.raises(CorpusError, match=r"d.parquet: no column 'text'; it has \['body', 'name'\]: set "
                       "source.text_column"):
        check_documents(str(path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match=r"holds no documents file \(.txt, .md, .jsonl"):
        check_documents(str(tmp_path / "empty"))
    blank = tmp_path / "blank.jsonl"
    blank.write_text(json.dumps({"text": " "}) + "\n")
    files = check_documents(str(blank))
    with pytest.raises(CorpusError, match=r"blank.jsonl: no documents to read: every record was skipped "
                       r"\({'empty_text': 1}\)"):
        list(iter_documents(files))
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(CorpusError, match="broken.parquet: cannot be read as parquet"):
        check_documents(str(tmp_path / "broken.parquet"))


def test_a_hub_dataset_of_text_files_leaves_out_its_card(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    folder = tmp_path / "hub" / "datasets--acme--notes"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    (folder / "blobs").mkdir()
    for i, (name, data) in enumerate({"README.md": "# a card", "data/a.txt": "a document"}.items()):
        (folder / "blobs" / f"b{i}").write_text(data)
        link = folder / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(folder / "blobs" / f"b{i}")
    files, docs, _, _ = read("hf://datasets/acme/notes")
    assert [f.name for f in files] == ["a.txt"] and docs == [("a.txt", None, "a document")]


def test_built_pairs_are_written_atomically_with_counts_per_builder(tmp_path, monkeypatch):
    pairs = [{"query": "q1", "document": "d1", "builder": "title", "doc_id": "a"},
             {"query": "q2", "document": "d2", "builder": "ict", "doc_id": "a", "score": None},
             {"query": "q3", "document": "d3", "builder": "generated", "doc_id": "b", "score": 0.25},
             {"query": "q4", "document": "d4", "builder": "ict", "doc_id": "b"}]
    out = tmp_path / "out" / "pairs.jsonl"
    assert write_pairs(out, iter(pairs)) == {"title": 1, "ict": 2, "generated": 1}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[2] == {"query": "q3", "document": "d3", "builder": "generated", "doc_id": "b", "score": 0.25}
    assert "score" not in rows[1] and len(rows) == 4
    parquet = tmp_path / "pairs.parquet"
    assert write_pairs(parquet, pairs) == {"title": 1, "ict": 2, "generated": 1}
    table = pq.read_table(parquet)
    assert table.column_names == ["query", "document", "builder", "doc_id", "score"]
    assert table.column("score").to_pylist() == [None, None, 0.25, None]

    def failing():
        yield {"query": "new", "document": "d", "builder": "ict", "doc_id": "z"}
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_pairs(out, failing())
    assert len(out.read_text().splitlines()) == 4  # the old file stands; no temporary is left
    assert sorted(p.name for p in out.parent.iterdir()) == ["pairs.jsonl"]


def test_no_files_at_all_is_an_error_too():
    with pytest.raises(CorpusError, match="no documents to read: they hold no record"):
        list(iter_documents([]))
