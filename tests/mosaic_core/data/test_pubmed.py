import gzip

import pytest
from builders import article, pubmed_xml, shared_data, write_xml

from mosaic_core.data import pubmed
from mosaic_core.data.pubmed import Citation, DeletedPmids, MalformedCitation, PubmedParseError, iter_citations


def parse(path):
    deleted = DeletedPmids()
    return list(iter_citations(path, deleted)), deleted.pmids


@pytest.mark.parametrize("shape", ["pubmed", "medline"])
@pytest.mark.parametrize("name", ["f.xml", "f.xml.gz"])
def test_both_shapes_and_compressions(tmp_path, shape, name):
    xml = pubmed_xml([article(1), article(2), article(3)], deleted=(7, 8), shape=shape)
    cits, deleted = parse(write_xml(tmp_path / name, xml))
    assert [c.pmid for c in cits] == [1, 2, 3]
    assert [c.record_index for c in cits] == [0, 1, 2]
    assert deleted == [7, 8]


def test_fields(tmp_path):
    xml = pubmed_xml([
        article(
            42,
            title="Effect of <i>E. coli</i> on CO<sub>2</sub> uptake: H<sup>+</sup> flux",
            abstract=[("BACKGROUND", "First <b>part</b>."), ("", "Unlabelled middle."), ("RESULTS", "Last part.")],
            version=2,
            journal="Tests &amp; Trials",
            keywords=("alpha", "beta <i>gamma</i>"),
            mesh=("Humans", "Escherichia coli"),
            language="ita",
            vernacular="Effetto di E. coli",
            pub_types=("Journal Article", "Review"),
        )
    ])
    (c,), _ = parse(write_xml(tmp_path / "f.xml", xml))
    assert isinstance(c, Citation)
    assert (c.pmid, c.version) == (42, 2)
    assert c.title == "Effect of E. coli on CO2 uptake: H+ flux"
    assert c.abstract_sections == ["First part.", "Unlabelled middle.", "Last part."]
    assert c.abstract_labels == ["BACKGROUND", "", "RESULTS"]
    assert c.abstract() == "First part. Unlabelled middle. Last part."
    assert c.abstract(prefix_labels=True) == "BACKGROUND: First part. Unlabelled middle. RESULTS: Last part."
    assert c.journal == "Tests & Trials"
    assert c.keywords == ["alpha", "beta gamma"]
    assert c.mesh_headings == ["Humans", "Escherichia coli"]
    assert c.publication_types == ["Journal Article", "Review"]
    assert c.languages == ["ita"]
    assert c.vernacular_title == "Effetto di E. coli"
    assert (c.pub_date, c.pub_year) == ("2020-02-03", 2020)


@pytest.mark.parametrize(
    "pub_date, expected",
    [
        ("<Year>2019</Year><Month>09</Month>", ("2019-09", 2019)),
        ("<Year>2019</Year>", ("2019", 2019)),
        ("<MedlineDate>1998 Dec-1999 Jan</MedlineDate>", ("1998 Dec-1999 Jan", 1998)),
        ("<Year>2001</Year><Season>Spring</Season>", ("2001", 2001)),
    ],
)
def test_pub_dates(tmp_path, pub_date, expected):
    (c,), _ = parse(write_xml(tmp_path / "f.xml", pubmed_xml([article(1, pub_date=pub_date)])))
    assert (c.pub_date, c.pub_year) == expected


def test_missing_abstract_and_malformed_pmid_are_reported_not_fatal(tmp_path):
    xml = pubmed_xml([article(1, abstract=None), article("abc"), article(3)])
    cits, _ = parse(write_xml(tmp_path / "f.xml", xml))
    assert isinstance(cits[0], Citation) and cits[0].abstract_sections == []
    assert isinstance(cits[1], MalformedCitation) and "abc" in cits[1].reason
    assert cits[2].pmid == 3


@pytest.mark.parametrize("name", ["f.xml", "f.xml.gz"])
def test_truncated_file_keeps_records_before_fault(tmp_path, name, monkeypatch):
    # Small read chunks, as in a real 30 MB file: the good prefix must survive the cut.
    real = pubmed.read_chunks
    monkeypatch.setattr(pubmed, "read_chunks", lambda p: real(p, chunk_size=512, gz_block=256))
    xml = pubmed_xml([article(i) for i in range(1, 51)])
    full = write_xml(tmp_path / ("full-" + name), xml)
    data = full.read_bytes()
    cut = tmp_path / name
    cut.write_bytes(data[: int(len(data) * 0.6)])
    got = []
    with pytest.raises(PubmedParseError) as info:
        for c in iter_citations(cut):
            got.append(c.pmid)
    assert 0 < len(got) < 50
    assert got == list(range(1, len(got) + 1))  # the good prefix, in order, nothing skipped
    assert info.value.records_before == len(got)
    assert str(cut) in str(info.value) and "re-download" in str(info.value)


@pytest.mark.parametrize(
    "damage, kept",
    [
        (("</MedlineCitation>", "</MedlineCitatio>"), 0),  # the first citation never closes
        (("<MedlineCitation ", "<MedlineCitatio "), 0),  # the first one's start tag is damaged
        (("</PubmedArticle>\n<PubmedArticle><MedlineCitation ",  # the second one's start tag
          "</PubmedArticle>\n<PubmedArticle><MedlineCitatio "), 1),
    ],
)
def test_damaged_citation_markup_is_an_error_after_the_good_part(tmp_path, damage, kept):
    """A damaged citation boundary would silently lose a citation: the file fails, loudly,
    after every citation before the damage."""
    xml = pubmed_xml([article(1), article(2), article(3)]).replace(*damage, 1)
    assert damage[1] in xml
    got = []
    with pytest.raises(PubmedParseError, match="damaged markup") as info:
        for c in iter_citations(write_xml(tmp_path / "f.xml", xml)):
            got.append(c.pmid)
    assert got == [1, 2, 3][:kept] and info.value.records_before == kept


def test_markup_xml_allows_reads_as_an_xml_parser_reads_it(tmp_path):
    """What a byte-level reader could get wrong: a ">" or quote inside a quoted attribute value,
    a comment inside text, character references, a name that merely starts like one we read."""
    a = article(
        1,
        title="Dose &#x3b1; &#946; <!-- editor: check > this --> response",
        abstract=[("A>B", "First."), ("PATIENT'S VIEW", "Second &lt;i&gt; literal.")],
        keywords=("k1",),
    ).replace("<ArticleTitle>", "<ArticleTitleNote>n</ArticleTitleNote><ArticleTitle>")
    (c,), _ = parse(write_xml(tmp_path / "f.xml", pubmed_xml([a.replace('Label="A>B"', "Label='A&gt;B'")])))
    assert c.title == "Dose α β response"
    assert c.abstract_sections == ["First.", "Second <i> literal."]
    assert c.abstract_labels == ["A>B", "PATIENT'S VIEW"]
    (c,), _ = parse(write_xml(tmp_path / "g.xml", pubmed_xml([a])))
    assert c.abstract_labels == ["A>B", "PATIENT'S VIEW"] and c.keywords == ["k1"]


def test_a_broken_field_is_one_malformed_citation_and_the_file_goes_on(tmp_path):
    broken = [
        article(2).replace("</ArticleTitle>", ""),
        article(3, title="Caf\udce9 au lait"),  # a lone byte that is not UTF-8
        article(4, title="Tea &nbsp; milk"),  # an entity XML does not define
        article(5, abstract="Ends <i>early"),
        article(6, title="<![CDATA[a < b]]>"),
    ]
    xml = pubmed_xml([article(1), *broken, article(7)]).encode("utf-8", "surrogateescape")
    path = tmp_path / "f.xml"
    path.write_bytes(xml)
    cits, _ = parse(path)
    assert [c.pmid for c in cits if isinstance(c, Citation)] == [1, 5, 7]
    assert cits[4].abstract_sections == ["Ends early"]  # an unclosed inline tag costs nothing
    bad = [c for c in cits if isinstance(c, MalformedCitation)]
    assert [c.record_index for c in bad] == [1, 2, 3, 5]
    assert "<ArticleTitle> is never closed" in bad[0].reason
    assert "UTF-8" in bad[1].reason and "&nbsp;" in bad[2].reason and "CDATA" in bad[3].reason


def test_corrupt_gzip_keeps_records_before_the_damage(tmp_path):
    path = write_xml(tmp_path / "f.xml.gz", pubmed_xml([article(i) for i in range(1, 3000)]))
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    path.write_bytes(bytes(data))
    got = []
    with pytest.raises(PubmedParseError):
        for c in iter_citations(path):
            got.append(c.pmid)
    # Corrupt deflate data can decode to copies of earlier bytes until the CRC at the end says
    # otherwise: well-formed repeats of the last good citation (the catalog keeps one of each
    # PMID and version), never a wrong or skipped one.
    distinct = list(dict.fromkeys(got))
    assert len(distinct) > 1000 and distinct == list(range(1, len(distinct) + 1))


def test_wrong_root_is_an_error(tmp_path):
    with pytest.raises(PubmedParseError, match="root element is <html>"):
        list(iter_citations(write_xml(tmp_path / "f.xml", "<html><body>404</body></html>")))


@pytest.mark.parametrize("shape", ["pubmed", "medline"])
def test_citations_cut_by_any_chunk_boundary_parse_as_in_one_piece(tmp_path, monkeypatch, shape):
    xml = pubmed_xml([article(i, keywords=("k",), mesh=("Humans",)) for i in range(1, 6)], deleted=(9,), shape=shape)
    path = write_xml(tmp_path / "f.xml", xml)
    reference = parse(path)
    assert [c.pmid for c in reference[0]] == [1, 2, 3, 4, 5] and reference[1] == [9]
    real = pubmed.read_chunks
    for size in (1, 7, 13, 64, 333):
        monkeypatch.setattr(pubmed, "read_chunks", lambda p, s=size: real(p, chunk_size=s))
        assert parse(path) == reference, size


@pytest.mark.slow
def test_memory_is_flat_in_file_size(tmp_path):
    """Peak RSS of a process streaming 40,000 citations is that of one streaming 4,000."""
    import subprocess
    import sys

    def peak_mb(n):
        path = write_xml(tmp_path / f"f{n}.xml.gz", pubmed_xml([article(i) for i in range(1, n + 1)]))
        code = ("import re; from mosaic_core.data.pubmed import iter_citations\n"
                f"assert sum(1 for _ in iter_citations({str(path)!r})) == {n}\n"
                "print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))")
        return int(subprocess.check_output([sys.executable, "-c", code])) / 1024

    small, large = peak_mb(4_000), peak_mb(40_000)
    assert large < small + 15, (small, large)


def _full_tree_parse(path):
    """Reference: the whole file as one lxml tree (fine for small files), read with ElementPath:
    an XML parser the byte-level one shares no code with."""
    from lxml import etree

    def text(elem):
        return " ".join("".join(elem.itertext()).split()) if elem is not None else ""

    with open(path, "rb") as fh:
        data = fh.read()
    root = etree.fromstring(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    return [
        (
            int(mc.findtext("PMID")),
            text(mc.find("Article/ArticleTitle")),
            [text(a) for a in mc.iterfind("Article/Abstract/AbstractText")],
            [a.get("Label") or "" for a in mc.iterfind("Article/Abstract/AbstractText")],
            text(mc.find("Article/Journal/Title")),
            [t for t in (text(k) for k in mc.iterfind("KeywordList/Keyword")) if t],
            [text(d) for d in mc.iterfind("MeshHeadingList/MeshHeading/DescriptorName")],
            [text(p) for p in mc.iterfind("Article/PublicationTypeList/PublicationType")],
            [text(x) for x in mc.iterfind("Article/Language")],
            text(mc.find("Article/VernacularTitle")),
        )
        for mc in root.iter("MedlineCitation")
    ]


def test_real_files_match_independent_parses():
    """Every real file: every field we read as a full-tree lxml parse sees it; current-shape
    files also agree with pubmed_parser on PMID, title and journal."""
    pp = pytest.importorskip("pubmed_parser")
    folder = shared_data("pubmed")
    for path in sorted(folder.iterdir()):
        ours = [c for c in iter_citations(path) if isinstance(c, Citation)]
        fields = [(c.pmid, c.title, c.abstract_sections, c.abstract_labels, c.journal, c.keywords,
                   c.mesh_headings, c.publication_types, c.languages, c.vernacular_title) for c in ours]
        assert fields == _full_tree_parse(path), path.name
        assert len({c.pmid for c in ours}) == len(ours), f"duplicate PMIDs in {path.name}"
        if not path.name.endswith(".gz"):
            continue  # this pubmed_parser version reads every path as gzip
        theirs = [t for t in pp.parse_medline_xml(str(path)) if not t.get("delete")]
        if not theirs:  # pubmed_parser does not read the older MedlineCitationSet shape
            continue
        assert len(ours) == len(theirs), path.name
        for c, t in zip(ours, theirs, strict=True):
            assert (str(c.pmid), c.journal) == (t["pmid"], t["journal"])
            assert c.title.split() == t["title"].split(), (path.name, c.pmid)


def test_real_medline_shape_deletions_and_italian_titles():
    path = shared_data("pubmed", "medline16n0902.xml.gz")
    deleted = DeletedPmids()
    cits = list(iter_citations(path, deleted))
    assert len(cits) == 604
    assert deleted.pmids == [26432306]
    italian = [c for c in cits if c.languages == ["ita"]]
    assert len(italian) == 18
    assert all(c.title.startswith("[") for c in italian if c.vernacular_title)


def test_gzip_detected_by_content_not_name(tmp_path):
    path = tmp_path / "odd.xml"
    path.write_bytes(gzip.compress(pubmed_xml([article(5)]).encode()))
    assert [c.pmid for c in iter_citations(path)] == [5]
