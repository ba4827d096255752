import pytest
from builders import article, pubmed_xml, write_xml

from flows.ingest import IngestFailed, ingest_flow
from mosaic_core.config import IngestConfig, PairConfig
from storage.catalog import Catalog
from storage.layout import DataLayout
from storage.manifest import read_manifest

ABS = ("We studied a large cohort of patients with the disease over several years and report that "
       "the new treatment reduced the rate of the primary outcome compared with standard care in "
       "every subgroup that was examined.")

pytestmark = pytest.mark.usefixtures("prefect_harness")


def src_file(folder, n, pmids):
    return write_xml(folder / f"pubmed26n{n:04d}.xml.gz",
                     pubmed_xml([article(p, title=f"Article number {p} about outcomes", abstract=ABS) for p in pmids]))


def mtimes(root):
    layout = DataLayout(root)
    return {p.parent.name: p.stat().st_mtime_ns for p in layout.dataset_dir("citations").glob("*/part.parquet")}


def test_rerun_processes_only_new_changed_or_failed_files(tmp_path):
    src, root = tmp_path / "src", str(tmp_path / "root")
    src_file(src, 1, [1, 2, 3])
    src_file(src, 2, [4, 5])
    cfg = IngestConfig(source=str(src))
    first = ingest_flow(cfg, root, progress=False)
    assert sorted(m.kept for m in first) == [2, 3]
    before = mtimes(root)

    second = ingest_flow(cfg, root, progress=False)  # nothing new: everything from cache
    assert mtimes(root) == before
    assert sorted(m.finished_at for m in second) == sorted(m.finished_at for m in first)

    src_file(src, 3, [6])  # a new update file appears
    ingest_flow(cfg, root, progress=False)
    after = mtimes(root)
    assert {k: v for k, v in after.items() if k != "source=pubmed26n0003"} == before
    assert "source=pubmed26n0003" in after

    src_file(src, 2, [4, 5, 7])  # a changed file (new checksum) is processed again
    ingest_flow(cfg, root, progress=False)
    changed = mtimes(root)
    assert changed["source=pubmed26n0002"] != after["source=pubmed26n0002"]
    assert changed["source=pubmed26n0001"] == after["source=pubmed26n0001"]

    with Catalog(DataLayout(root)) as cat:
        cat.refresh()
        assert cat.totals()["latest_pairs"] == 7


def test_truncated_file_fails_loudly_keeps_good_records_and_is_retried(tmp_path):
    src, root = tmp_path / "src", str(tmp_path / "root")
    src_file(src, 1, [1, 2])
    bad = src_file(src, 2, list(range(10, 60)))
    good_bytes = bad.read_bytes()
    bad.write_bytes(good_bytes[: len(good_bytes) // 2])  # a download cut short
    cfg = IngestConfig(source=str(src))
    with pytest.raises(IngestFailed, match="pubmed26n0002"):
        ingest_flow(cfg, root, progress=False)
    m = read_manifest(DataLayout(root), "ingest", "pubmed26n0002")
    assert m.status == "partial" and "truncated" in m.error
    assert 0 < m.records_in < 50 and m.kept == m.records_in
    with Catalog(DataLayout(root)) as cat:
        cat.refresh()
        assert cat.rows("SELECT count(*) FROM citations WHERE source_file = 'pubmed26n0002'")[0][0] == m.records_in

    before = mtimes(root)
    bad.write_bytes(good_bytes)  # re-downloaded
    ingest_flow(cfg, root, progress=False)
    after = mtimes(root)
    assert after["source=pubmed26n0001"] == before["source=pubmed26n0001"]
    assert after["source=pubmed26n0002"] != before["source=pubmed26n0002"]
    m = read_manifest(DataLayout(root), "ingest", "pubmed26n0002")
    assert (m.status, m.records_in) == ("complete", 50)
    with Catalog(DataLayout(root)) as cat:  # replaced, not appended: no double counting
        cat.refresh()
        assert cat.rows("SELECT count(*), count(DISTINCT pmid) FROM citations")[0] == (52, 52)


def test_deleted_output_or_new_config_is_rebuilt(tmp_path):
    src, root = tmp_path / "src", str(tmp_path / "root")
    src_file(src, 1, [1, 2])
    cfg = IngestConfig(source=str(src))
    ingest_flow(cfg, root, progress=False)
    part = DataLayout(root).partition_path("citations", "pubmed26n0001")
    part.unlink()
    ingest_flow(cfg, root, progress=False)
    assert part.exists()
    before = part.stat().st_mtime_ns
    ingest_flow(cfg.model_copy(update={"pairs": PairConfig(min_abstract_words=5)}), root, progress=False)
    assert part.stat().st_mtime_ns != before


def test_http_mirror_with_transient_failure(tmp_path, http_mirror):
    base, mirror, fail_next = http_mirror
    write_xml(mirror / "pubmed" / "baseline" / "pubmed26n0001.xml.gz",
              pubmed_xml([article(1, abstract=ABS)]), md5_sidecar=True)
    write_xml(mirror / "pubmed" / "updatefiles" / "pubmed26n0002.xml.gz",
              pubmed_xml([article(2, abstract=ABS)], deleted=(1,)), md5_sidecar=True)
    fail_next["/pubmed/updatefiles/pubmed26n0002.xml.gz"] = 1  # first GET answers 503
    root = str(tmp_path / "root")
    manifests = ingest_flow(IngestConfig(source=base), root, progress=False)
    assert sorted(m.partition for m in manifests) == ["pubmed26n0001", "pubmed26n0002"]
    assert fail_next["/pubmed/updatefiles/pubmed26n0002.xml.gz"] == 0
    with Catalog(DataLayout(root)) as cat:
        cat.refresh()
        assert cat.rows("SELECT pmid FROM latest_pairs") == [(2,)]


def test_dask_task_runner_runs_the_per_file_map_on_loopback_only(tmp_path):
    """The --workers path: per-file tasks on a local Dask cluster of processes whose scheduler and
    dashboard listen on 127.0.0.1, never on every interface."""
    from urllib.parse import urlparse

    from flows.runners import task_runner

    src, root = tmp_path / "src", str(tmp_path / "root")
    for n in range(1, 4):
        src_file(src, n, [10 * n, 10 * n + 1])
    runner = task_runner(workers=2)
    with runner:
        client = runner.client
        assert urlparse(client.scheduler.address).hostname == "127.0.0.1"
        assert urlparse(client.dashboard_link).hostname == "127.0.0.1"
    manifests = ingest_flow.with_options(task_runner=task_runner(workers=2))(IngestConfig(source=str(src)), root,
                                                                             progress=False)
    assert sorted(m.partition for m in manifests) == ["pubmed26n0001", "pubmed26n0002", "pubmed26n0003"]
    assert sum(m.kept for m in manifests) == 6


def test_the_hand_written_sample_ingests_with_revisions_deletions_and_inline_markup(tmp_path):
    from pathlib import Path

    sample = Path(__file__).resolve().parents[1] / "fixtures" / "pubmed_sample"
    root = str(tmp_path / "root")
    ingest_flow(IngestConfig(source=str(sample)), root, progress=False)
    with Catalog(DataLayout(root)) as cat:
        cat.refresh()
        latest = {pmid: (title, source) for pmid, title, source in
                  cat.rows("SELECT pmid, title, source_file FROM latest_citations")}
    assert 90000010 not in latest  # deleted by the update file
    assert latest[90000003][1] == "pubmed26n0002"  # the revised version from the update file wins
    assert latest[90000011][0].startswith("Low-dose aspirin")  # new in the update file
    assert "transfusion-dependent beta-thalassaemia" in latest[90000001][0]  # <i>beta</i> kept as text
    assert len(latest) == 10  # 10 baseline citations + 1 new - 1 deleted
