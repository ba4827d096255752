import pytest
from builders import article, pubmed_xml, write_xml

from storage.layout import DataLayout, file_sequence, partition_name
from storage.sources import (
    ChecksumMismatch,
    SourceError,
    TransientDownloadError,
    fetch,
    list_source,
    md5_of,
)


def make_mirror(mirror, names=("pubmed26n0001.xml.gz", "pubmed26n0002.xml.gz"), subset="baseline"):
    for i, name in enumerate(names):
        write_xml(mirror / subset / name, pubmed_xml([article(100 + i)]), md5_sidecar=True)


def test_partition_names_and_order():
    assert partition_name("pubmed25n0001.xml.gz") == "pubmed25n0001"
    assert partition_name("/x/medline16n0902.xml") == "medline16n0902"
    assert file_sequence("pubmed25n1300.xml.gz") > file_sequence("pubmed25n0001.xml.gz")
    assert file_sequence("pubmed26n0001.xml.gz") > file_sequence("pubmed25n1300.xml.gz")
    assert file_sequence("my-export.xml") == -1
    with pytest.raises(ValueError):
        partition_name("bad name?.xml")


def test_local_directory_glob_file_and_mirror(tmp_path):
    make_mirror(tmp_path / "m")
    make_mirror(tmp_path / "m", ("pubmed26n0003.xml.gz",), subset="updatefiles")
    files = list_source(str(tmp_path / "m"))
    assert [(f.name, f.subset) for f in files] == [
        ("pubmed26n0001.xml.gz", "baseline"), ("pubmed26n0002.xml.gz", "baseline"),
        ("pubmed26n0003.xml.gz", "updatefiles")]
    assert [f.name for f in list_source(str(tmp_path / "m"), ("updatefiles",))] == ["pubmed26n0003.xml.gz"]
    assert len(list_source(str(tmp_path / "m" / "baseline"))) == 2
    assert len(list_source(str(tmp_path / "m" / "baseline" / "*0001.xml.gz"))) == 1
    assert len(list_source(str(tmp_path / "m" / "baseline" / "pubmed26n0002.xml.gz"))) == 1


def test_local_errors_are_specific(tmp_path):
    with pytest.raises(SourceError, match="neither an existing"):
        list_source(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no \\*.xml"):
        list_source(str(tmp_path / "empty"))
    write_xml(tmp_path / "d" / "a.xml", pubmed_xml([article(1)]))
    write_xml(tmp_path / "d" / "a.xml.gz", pubmed_xml([article(1)]))
    with pytest.raises(SourceError, match="same partition"):
        list_source(str(tmp_path / "d"))


def test_local_file_checked_against_its_sidecar(tmp_path):
    make_mirror(tmp_path / "m")
    (src,) = list_source(str(tmp_path / "m" / "baseline" / "pubmed26n0001.xml.gz"))
    local = fetch(src, DataLayout(tmp_path / "root"))
    assert local.md5 == md5_of(src.location) and local.path == src.location
    with open(src.location, "ab") as fh:
        fh.write(b"garbage")
    with pytest.raises(SourceError, match="does not match its sidecar"):
        fetch(src, DataLayout(tmp_path / "root"))


def test_http_listing_download_and_reuse(tmp_path, http_mirror):
    base, mirror, _ = http_mirror
    make_mirror(mirror / "pubmed")
    make_mirror(mirror / "pubmed", ("pubmed26n0003.xml.gz",), subset="updatefiles")
    files = list_source(base)
    assert [(f.partition, f.subset) for f in files] == [
        ("pubmed26n0001", "baseline"), ("pubmed26n0002", "baseline"), ("pubmed26n0003", "updatefiles")]
    layout = DataLayout(tmp_path / "root")
    local = fetch(files[0], layout)
    assert local.path == str(layout.raw_dir / "baseline" / "pubmed26n0001.xml.gz")
    assert md5_of(local.path) == local.md5 == md5_of(mirror / "pubmed" / "baseline" / "pubmed26n0001.xml.gz")
    mtime = (layout.raw_dir / "baseline" / "pubmed26n0001.xml.gz").stat().st_mtime_ns
    assert fetch(files[0], layout).md5 == local.md5  # verified copy reused, not fetched again
    assert (layout.raw_dir / "baseline" / "pubmed26n0001.xml.gz").stat().st_mtime_ns == mtime


def test_http_bad_checksum_leaves_no_file(tmp_path, http_mirror):
    base, mirror, _ = http_mirror
    make_mirror(mirror / "pubmed")
    (mirror / "pubmed" / "baseline" / "pubmed26n0001.xml.gz.md5").write_text("MD5(x)= " + "0" * 32)
    layout = DataLayout(tmp_path / "root")
    with pytest.raises(ChecksumMismatch):
        fetch(list_source(base)[0], layout)
    assert not list((layout.raw_dir / "baseline").iterdir())  # no partial, no temp file


def test_http_errors_classified(tmp_path, http_mirror):
    base, mirror, fail_next = http_mirror
    make_mirror(mirror / "pubmed")
    files = list_source(base)
    fail_next["/pubmed/baseline/pubmed26n0001.xml.gz"] = 1
    with pytest.raises(TransientDownloadError, match="503"):
        fetch(files[0], DataLayout(tmp_path / "root"))
    assert fetch(files[0], DataLayout(tmp_path / "root")).md5  # the retry succeeds
    (mirror / "pubmed" / "baseline" / "pubmed26n0002.xml.gz").unlink()
    with pytest.raises(SourceError, match="404") as info:
        fetch(files[1], DataLayout(tmp_path / "root"))
    assert not isinstance(info.value, TransientDownloadError)
