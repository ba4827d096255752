"""A run's glossary on disk: tables and MeSH read with every bad record counted, a file that is no
glossary named, a download verified and reused, the data root's files written and healed."""

import gzip
import hashlib
import json

import pytest

from mosaic_core.config import GlossaryConfig
from storage.glossary import local_glossary, written_glossary
from storage.pairs_io import CorpusError
from tasks.glossary_file import check_glossary, glossary_identity, read_glossary, write_glossary

MESH = (b'<?xml version="1.0"?>\n<DescriptorRecordSet LanguageCode="eng">'
        b'<DescriptorRecord><DescriptorName><String>Temefos</String></DescriptorName><ConceptList>'
        b'<Concept PreferredConceptYN="Y"><ScopeNote>An organothiophosphorus insecticide.</ScopeNote><TermList>'
        b'<Term IsPermutedTermYN="N"><String>Temephos</String></Term></TermList></Concept></ConceptList>'
        b'</DescriptorRecord></DescriptorRecordSet>\n')


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_a_table_keeps_good_entries_and_counts_the_bad_by_reason(tmp_path):
    path = _jsonl(tmp_path / "g.jsonl", [
        {"term": "zorvatide", "definition": "a drug", "synonyms": ["zv", "ZV-1"], "examples": "It was given."},
        {"term": "keltrase", "definition": ""}, {"definition": "orphan"}, "{not json",
        {"term": "Zorvatide", "definition": "again"}, {"term": "plenixor", "definition": ["a", "list"]}])
    dropped = {}
    entries = list(read_glossary(path, GlossaryConfig(path=str(path)), dropped))
    assert [(e.term, e.synonyms, e.examples) for e in entries] == [("zorvatide", ("zv", "ZV-1"), ("It was given.",))]
    assert dropped == {"missing_definition": 1, "missing_term": 1, "invalid_json": 1, "duplicate_term": 1,
                       "non_text": 1}


def test_csv_and_tsv_with_columns_of_other_names(tmp_path):
    csv = tmp_path / "g.csv"
    csv.write_text('name,meaning\nzorvatide,"a drug, for the heart"\n')
    tsv = tmp_path / "g.tsv"
    tsv.write_text("name\tmeaning\tsynonyms\nkeltrase\tan enzyme\tklt; keltrasin\n")
    cfg = {"term_column": "name", "definition_column": "meaning"}
    got = [e for p in (csv, tsv) for e in read_glossary(p, GlossaryConfig(path=str(p), **cfg), {})]
    assert [(e.term, e.definition, e.synonyms) for e in got] == [
        ("zorvatide", "a drug, for the heart", ()), ("keltrase", "an enzyme", ("klt", "keltrasin"))]


def test_a_file_that_is_no_glossary_is_named_with_what_to_do(tmp_path):
    pairs = _jsonl(tmp_path / "pairs.jsonl", [{"query": "q", "document": "d"}])
    with pytest.raises(CorpusError, match=r"pairs.jsonl: no column 'term' or 'definition'.*glossary.term_column"):
        list(read_glossary(pairs, GlossaryConfig(path=str(pairs)), {}))
    pubmed = tmp_path / "pubmed.xml"
    pubmed.write_bytes(b"<PubmedArticleSet></PubmedArticleSet>")
    with pytest.raises(CorpusError, match="not a MeSH descriptor file"):
        list(read_glossary(pubmed, GlossaryConfig(path=str(pubmed)), {}))
    broken = tmp_path / "desc.xml.gz"
    broken.write_bytes(gzip.compress(MESH[:120]))
    with pytest.raises(CorpusError, match="desc.xml.gz: cannot be read as MeSH"):
        list(read_glossary(broken, GlossaryConfig(path=str(broken)), {}))
    with pytest.raises(CorpusError, match="no such file"):
        check_glossary(GlossaryConfig(path=str(tmp_path / "missing.jsonl")))


def test_mesh_gz_reads_as_mesh_whatever_its_name(tmp_path):
    path = tmp_path / "desc2025.gz"  # as NLM names it
    path.write_bytes(gzip.compress(MESH))
    [entry] = read_glossary(path, GlossaryConfig(path=str(path)), {})
    assert (entry.term, entry.definition, entry.synonyms) == ("Temefos", "An organothiophosphorus insecticide.",
                                                              ("Temephos",))


def test_a_url_is_downloaded_into_the_root_checked_and_reused(tmp_path, http_mirror):
    base, mirror, _ = http_mirror
    (mirror / "pubmed").mkdir()
    (mirror / "pubmed" / "desc2025.xml").write_bytes(MESH)
    cfg = GlossaryConfig(path=base + "desc2025.xml")
    root = tmp_path / "root"
    path = local_glossary(cfg.path, root)  # no .md5 published: taken as it comes
    assert path == root / "raw" / "glossary" / "desc2025.xml" and path.read_bytes() == MESH
    (mirror / "pubmed" / "desc2025.xml.md5").write_text(f"MD5(desc2025.xml)= {hashlib.md5(MESH).hexdigest()}\n")
    mtime = path.stat().st_mtime_ns
    assert local_glossary(cfg.path, root) == path and path.stat().st_mtime_ns == mtime  # verified, reused
    (mirror / "pubmed" / "desc2025.xml.md5").write_text("MD5(desc2025.xml)= " + "0" * 32)
    path.unlink()
    with pytest.raises(Exception, match="does not match the published"):
        local_glossary(cfg.path, root)
    assert not path.exists()


def test_the_root_s_files_are_written_once_and_healed(tmp_path):
    path = _jsonl(tmp_path / "g.jsonl", [{"term": "zorvatide", "definition": "a drug", "synonyms": "zv"},
                                          {"term": "keltrase", "definition": "an enzyme"},
                                          {"term": "glexitol", "definition": "never used"}])
    cfg, root = GlossaryConfig(path=str(path)), tmp_path / "root"
    identity = glossary_identity(cfg, root, "corpus-1")
    record = write_glossary(cfg, root, identity, ["Zorvatide was given.", "Keltrase rose; ZV too."])
    assert record["entries"] == 2 and record["dropped"] == {"unused": 1}
    assert record["dictionary_texts"] == 2 * cfg.dictionary.texts_per_term + 1  # and one for the synonym
    assert record["definition_pairs"] == 2 * cfg.definition_pairs  # the term, then a synonym or a question
    pairs = [json.loads(line) for line in open(record["pairs_path"])]
    assert pairs[0] == {"query": "zorvatide", "document": "a drug"} and pairs[1]["document"] == "a drug"
    assert written_glossary(root, identity) == record
    assert written_glossary(root, glossary_identity(cfg, root, "corpus-2")) is None  # the corpus changed
    (root / "glossary" / "dictionary.jsonl").unlink()
    assert written_glossary(root, identity) is None  # a file lost: written again
    with pytest.raises(CorpusError, match="no usable glossary entry.*corpus must name it"):
        write_glossary(cfg, root, identity, ["Nothing of it here."])
