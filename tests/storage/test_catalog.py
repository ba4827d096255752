import pytest
from builders import article, pubmed_xml, write_xml

from mosaic_core.config import IngestConfig
from storage.catalog import Catalog
from storage.layout import DataLayout
from storage.sources import fetch, list_source
from tasks.ingest import ingest_file

ABS = ("We studied a large cohort of patients with the disease over several years and report that "
       "the new treatment reduced the rate of the primary outcome compared with standard care in "
       "every subgroup that was examined.")


def ingest_dir(folder, root):
    cfg = IngestConfig(source=str(folder))
    for src in list_source(cfg.source):
        ingest_file.fn(fetch(src, DataLayout(root)), cfg, str(root))


def test_latest_version_wins_and_deletions_apply(tmp_path):
    m = tmp_path / "mirror"
    write_xml(m / "baseline" / "pubmed26n0001.xml.gz", pubmed_xml([
        article(1, title="First article about kidney outcomes", abstract=ABS),
        article(2, title="Second article original title here", abstract=ABS),
        article(3, title="Third article without any abstract", abstract=None),
    ]))
    write_xml(m / "updatefiles" / "pubmed26n0002.xml.gz", pubmed_xml([
        article(2, title="Second article revised title here", abstract=ABS),
        article(4, title="Fourth article about heart outcomes", abstract=ABS),
    ], deleted=(1,)))
    write_xml(m / "updatefiles" / "pubmed26n0003.xml.gz", pubmed_xml([
        article(4, title="Fourth article corrected in the same file", abstract=ABS),
        article(4, title="Fourth article corrected twice in the same file", abstract=ABS),
    ]))
    root = tmp_path / "root"
    ingest_dir(m, root)
    with Catalog(DataLayout(root)) as cat:
        cat.refresh()
        latest = dict(cat.rows("SELECT pmid, title FROM latest_citations ORDER BY pmid"))
        assert latest == {
            2: "Second article revised title here",
            3: "Third article without any abstract",
            4: "Fourth article corrected twice in the same file",
        }
        pairs = [r[0] for r in cat.rows("SELECT pmid FROM latest_pairs ORDER BY pmid")]
        assert pairs == [2, 4]
        stats = cat.file_stats()
        assert [(s[0], s[1], s[2], s[3], s[5]) for s in stats] == [
            ("pubmed26n0001", "complete", 3, 2, 0),
            ("pubmed26n0002", "complete", 2, 2, 1),
            ("pubmed26n0003", "complete", 2, 2, 0),
        ]
        assert cat.drop_reasons() == [("missing_abstract", 1)]
        assert cat.totals() == {"citation_rows": 7, "kept_rows": 6, "latest_citations": 3,
                                "latest_pairs": 2, "deleted_pmids": 1}


def test_deleted_then_reinstated_pmid_is_back(tmp_path):
    m = tmp_path / "mirror"
    write_xml(m / "baseline" / "pubmed26n0001.xml", pubmed_xml([article(1, abstract=ABS)]))
    write_xml(m / "updatefiles" / "pubmed26n0002.xml", pubmed_xml([], deleted=(1,)))
    back = article(1, title="Back again after the deletion", abstract=ABS)
    write_xml(m / "updatefiles" / "pubmed26n0003.xml", pubmed_xml([back]))
    ingest_dir(m, tmp_path / "root")
    with Catalog(DataLayout(tmp_path / "root")) as cat:
        cat.refresh()
        assert cat.rows("SELECT pmid, title FROM latest_pairs") == [(1, "Back again after the deletion")]


def test_empty_root_has_empty_views(tmp_path):
    with Catalog(DataLayout(tmp_path)) as cat:
        cat.refresh()
        assert cat.file_stats() == [] and cat.drop_reasons() == []
        assert cat.totals()["latest_pairs"] == 0


def test_a_data_root_whose_path_holds_glob_characters(tmp_path):
    from storage.history import record_evaluation

    m = tmp_path / "mirror"
    write_xml(m / "baseline" / "pubmed26n0001.xml.gz", pubmed_xml([
        article(1, title="First article about kidney outcomes", abstract=ABS)]))
    with pytest.raises(ValueError, match="without '\\?'"):  # DuckDB cannot open a catalog there: fail first
        DataLayout(tmp_path / "runs?nightly")
    root = tmp_path / "runs [2026] *nightly"
    ingest_dir(m, root)
    record_evaluation(DataLayout(root), "r1", [{"model": "m", "task": "t", "metric": "ndcg_at_10", "value": 0.5}])
    with Catalog(DataLayout(root)) as cat:
        cat.refresh()
        assert cat.rows("SELECT pmid FROM latest_pairs") == [(1,)]
        assert cat.rows("SELECT run_id, value FROM eval_history") == [("r1", 0.5)]
