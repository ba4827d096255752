import json

import numpy as np
import pytest
from builders import article, pubmed_xml, tiny_bert, varied_articles, write_xml

from flows.filter import filter_flow
from flows.ingest import ingest_flow
from mosaic_core.config import FilterConfig, IngestConfig
from storage.catalog import Catalog
from storage.embeddings import load_embeddings
from storage.layout import DataLayout
from storage.manifest import read_manifest

pytestmark = pytest.mark.usefixtures("prefect_harness")

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron sigma tau omega".split()


def pairs_file(path, n=40):
    rng = np.random.default_rng(0)
    lines = []
    for i in range(n):
        topic = rng.choice(WORDS, 3, replace=False)
        lines.append(json.dumps({"id": f"p{i}", "query": " ".join(topic),
                                 "document": " ".join(rng.choice(WORDS, 4)) + " " + " ".join(topic)}))
    lines.append(json.dumps({"id": "dup", "query": "alpha beta", "document": json.loads(lines[0])["document"]}))
    lines += ["{not json", json.dumps({"id": "x", "query": "no document"}), json.dumps({"id": "y", "query": "",
                                                                                          "document": "d"})]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_filter_pairs_file_bad_rows_reproducible_and_refilter_without_reencoding(tmp_path):
    src = pairs_file(tmp_path / "pairs.jsonl")
    root = str(tmp_path / "root")
    cfg = FilterConfig(model=str(tiny_bert(tmp_path / "model")), k=2, precision="fp32", batch_tokens=48)  # GPU batching
    (m,) = filter_flow(str(src), cfg, root)
    assert (m.records_in, m.rows_out) == (44, 41)
    assert m.dropped["invalid_json"] == 1 and m.dropped["missing_document"] == 1 and m.dropped["missing_query"] == 1
    assert m.dropped["inconsistent"] == 41 - m.kept and m.chunk == 0
    layout = DataLayout(root)
    with Catalog(layout) as cat:
        cat.refresh()
        rows = cat.rows("SELECT pair_id, document, kept, rank FROM filtered ORDER BY pair_id")
        assert cat.rows("SELECT count(*) FROM training_pairs")[0][0] == m.kept
    # Independent re-implementation of the rule on the stored embeddings agrees exactly.
    q, d = load_embeddings(next((layout.root / "embeddings").rglob("pairs.npz")))
    with Catalog(layout) as cat:
        cat.refresh()
        ordered = cat.rows("SELECT pair_id, document, kept FROM filtered")
    docs = [r[1] for r in ordered]
    uniq = list(dict.fromkeys(docs))
    ud = d[[docs.index(u) for u in uniq]]
    scores = q @ ud.T
    own = scores[np.arange(len(q)), [uniq.index(x) for x in docs]]
    expected = (1 + (scores > own[:, None]).sum(1)) <= 2
    assert [r[2] for r in ordered] == expected.tolist()
    assert 0 < sum(expected) < len(expected)
    assert {r[0] for r in rows} >= {"dup", "p0"}

    emb = next((layout.root / "embeddings").rglob("pairs.npz"))
    mtime = emb.stat().st_mtime_ns
    (m3,) = filter_flow(str(src), cfg.model_copy(update={"k": 5}), root)
    assert emb.stat().st_mtime_ns == mtime  # new k: re-filtered, not re-encoded
    assert m3.kept >= m.kept
    (mt,) = filter_flow(str(src), cfg.model_copy(update={"mode": "threshold", "threshold": 0.5}), root)
    assert read_manifest(layout, "filter", "pairs").dropped.get("below_threshold") == 41 - mt.kept


def test_a_file_split_into_partitions_is_filtered_as_one(tmp_path, monkeypatch):
    from storage import pairs_io

    src = pairs_file(tmp_path / "pairs.jsonl")
    cfg = FilterConfig(model=str(tiny_bert(tmp_path / "model")), k=2, precision="fp32")
    (whole,) = filter_flow(str(src), cfg, str(tmp_path / "whole"))
    monkeypatch.setattr(pairs_io, "STREAM_ROWS", 4)
    monkeypatch.setattr(pairs_io, "PARTITION_ROWS", 12)
    parts = filter_flow(str(src), cfg, str(tmp_path / "split"))
    assert [m.partition for m in parts] == [f"pairs-{k:05d}" for k in range(4)]  # 44 rows read, 12 a partition
    assert {m.chunk for m in parts} == {0}  # one search over all of them, as over the whole file
    assert sum(m.kept for m in parts) == whole.kept and sum(m.rows_out for m in parts) == whole.rows_out
    assert {k: sum(m.dropped.get(k, 0) for m in parts) for k in whole.dropped} == whole.dropped

    def kept(root):
        with Catalog(DataLayout(root)) as cat:
            cat.refresh()
            return sorted(cat.rows("SELECT pair_id, kept, rank FROM filtered"))
    assert kept(str(tmp_path / "split")) == kept(str(tmp_path / "whole"))


def test_bounded_keeps_at_most_the_limit_in_flight_and_the_order():
    from flows.filter import bounded

    in_flight, most = [], []

    class Future:
        def __init__(self, item):
            self.item = item
            in_flight.append(item)
            most.append(len(in_flight))

        def result(self):
            in_flight.remove(self.item)
            return self.item * 10

    assert bounded(Future, [1, 2, 3, 4, 5], 2) == [10, 20, 30, 40, 50] and max(most) == 2
    most.clear()
    assert bounded(Future, [1, 2, 3], None) == [10, 20, 30] and max(most) == 3


def test_an_update_encodes_only_its_new_and_revised_pairs(tmp_path, monkeypatch):
    """An update file that revises one citation of a baseline file and deletes two of another:
    both baseline partitions change, and neither is encoded again; the update's pairs are. The
    filter then decides on the embeddings a fresh encoding of every pair gives."""
    import tasks.filter

    encoded: list[int] = []
    encode = tasks.filter._encode

    def counted(cfg, root, queries, documents):
        encoded.append(len(queries))
        return encode(cfg, root, queries, documents)
    monkeypatch.setattr(tasks.filter, "_encode", counted)
    src, root = tmp_path / "snapshot", str(tmp_path / "root")
    write_xml(src / "pubmed26n0001.xml", pubmed_xml(varied_articles(100, 12)))
    write_xml(src / "pubmed26n0002.xml", pubmed_xml(varied_articles(200, 12)))
    cfg = FilterConfig(model=str(tiny_bert(tmp_path / "model")), k=2, precision="fp32")
    ingest_flow(IngestConfig(source=str(src)), root, progress=False)
    filter_flow(root, cfg, root)
    assert encoded == [12, 12]

    encoded.clear()
    revised = article(105, version=2, title="Effect of a revised drug on outcomes in cohort 105",
                      abstract="We revised this abstract of cohort 105 after a second look at the records: the adult "
                               "patients given the drug had fewer events than the controls over the years they were "
                               "followed, consistently across every subgroup that was examined.")
    write_xml(src / "pubmed26n0003.xml", pubmed_xml([revised, *varied_articles(300, 3)], deleted=(201, 202)))
    ingest_flow(IngestConfig(source=str(src)), root, progress=False)
    manifests = filter_flow(root, cfg, root)
    assert [(m.partition, m.rows_out) for m in manifests] == [("pubmed26n0001", 11), ("pubmed26n0002", 10),
                                                             ("pubmed26n0003", 4)]
    assert encoded == [4]  # the update's revised and new pairs; the baseline partitions' 21 pairs reused

    for part in tasks.filter.list_partitions.fn(root, cfg):  # as if every pair had been encoded afresh
        rows = tasks.filter.read_pair_partition(part)
        stored = load_embeddings(DataLayout(root).root / "embeddings" / cfg.encoding_hash() / f"{part.name}.npz")
        afresh = encode(cfg, root, rows.queries, rows.documents)
        assert all(np.allclose(a, b, atol=2e-3) for a, b in zip(stored, afresh, strict=True)), part.name
