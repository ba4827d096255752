"""The glossary's records, MeSH descriptors, dictionary texts and definition pairs."""

import gzip
import io
from pathlib import Path

import pytest

from mosaic_core.config import DictionaryConfig
from mosaic_core.data.glossary import (GlossaryEntry, NotAGlossary, dedupe, definition_pairs, dictionary_texts,
                                       glossary_entry, mesh_entries, single_words, used_entries)

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"
MESH = b"""<?xml version="1.0"?>
<!DOCTYPE DescriptorRecordSet SYSTEM "desc2025.dtd">
<DescriptorRecordSet LanguageCode="eng">
<DescriptorRecord DescriptorClass="1"><DescriptorUI>D000001</DescriptorUI>
 <DescriptorName><String>Calcimycin</String></DescriptorName>
 <ConceptList>
  <Concept PreferredConceptYN="Y"><ConceptName><String>Calcimycin</String></ConceptName>
   <ScopeNote>An ionophorous, polyether antibiotic from Streptomyces chartreusensis.
   </ScopeNote>
   <TermList><Term IsPermutedTermYN="N"><String>Calcimycin</String></Term></TermList></Concept>
  <Concept PreferredConceptYN="N"><ConceptName><String>A-23187</String></ConceptName>
   <TermList><Term IsPermutedTermYN="N"><String>A-23187</String></Term>
    <Term IsPermutedTermYN="Y"><String>A23187, Antibiotic</String></Term>
    <Term IsPermutedTermYN="N"><String>Antibiotic A23187</String></Term></TermList></Concept>
 </ConceptList></DescriptorRecord>
<DescriptorRecord DescriptorClass="1"><DescriptorUI>D000002</DescriptorUI>
 <DescriptorName><String>Temefos</String></DescriptorName>
 <ConceptList><Concept PreferredConceptYN="Y"><ConceptName><String>Temefos</String></ConceptName>
  <TermList><Term IsPermutedTermYN="N"><String>Temephos</String></Term></TermList></Concept></ConceptList>
</DescriptorRecord>
</DescriptorRecordSet>
"""


def test_a_record_is_an_entry_or_a_reason():
    entry, reason = glossary_entry("  Zorvatide ", "a drug that\nblocks  calcium channels", "zorva; ZORVATIDE | zv",
                                   ["Serum zorvatide was measured."])
    assert reason is None
    assert entry == GlossaryEntry("Zorvatide", "a drug that blocks calcium channels", ("zorva", "zv"),
                                  ("Serum zorvatide was measured.",))
    assert entry.names == ("Zorvatide", "zorva", "zv")
    assert glossary_entry(None, "x") == (None, "missing_term")
    assert glossary_entry("x", "  ") == (None, "missing_definition")
    assert glossary_entry("x", 3) == (None, "non_text")
    assert glossary_entry("x", "y", {"a": 1}) == (None, "non_text")
    assert glossary_entry(" ".join(["word"] * 13), "y") == (None, "long_term")


def test_duplicates_are_counted_and_the_first_kept():
    dropped = {}
    kept = list(dedupe([glossary_entry("Keltrase", "an enzyme"), glossary_entry("keltrase", "another"),
                        glossary_entry(None, "x")], dropped))
    assert [e.definition for e in kept] == ["an enzyme"]
    assert dropped == {"duplicate_term": 1, "missing_term": 1}


def test_mesh_descriptors_give_name_scope_note_and_entry_terms():
    got = list(mesh_entries(io.BytesIO(MESH), "desc.xml"))
    assert got[0] == (GlossaryEntry("Calcimycin", "An ionophorous, polyether antibiotic from Streptomyces "
                                    "chartreusensis.", ("A-23187", "Antibiotic A23187")), None)
    assert got[1] == (None, "no_scope_note")


def test_a_file_that_is_no_mesh_is_named():
    with pytest.raises(NotAGlossary, match="other.xml.*<PubmedArticleSet>"):
        list(mesh_entries(io.BytesIO(b"<PubmedArticleSet><PubmedArticle/></PubmedArticleSet>"), "other.xml"))


def test_dictionary_texts_use_every_template_before_repeating_and_are_seeded():
    templates = DictionaryConfig().templates
    entry = GlossaryEntry("zorvatide", "a drug that blocks calcium channels", ("zv",), ("Zorvatide was given.",))
    texts = [t for _, t in dictionary_texts([entry], templates, len(templates), seed=0)]
    assert len(texts) == len(templates) + 2  # one per template, one per synonym, one per example
    assert all("a drug that blocks calcium channels" in t for t in texts[:-1])
    assert texts[-2] == "zorvatide, also called zv: a drug that blocks calcium channels"
    assert texts[-1] == "zorvatide is used in contexts such as: Zorvatide was given."
    assert texts == [t for _, t in dictionary_texts([entry], templates, len(templates), seed=0)]
    other = GlossaryEntry("keltrase", "an enzyme")
    alone = list(dictionary_texts([entry], templates, 3, seed=1))
    assert alone == list(dictionary_texts([other, entry], templates, 3, seed=1))[3:]  # a function of the entry


def test_definition_pairs_ask_for_the_definition_by_the_term_then_other_ways():
    entry = GlossaryEntry("zorvatide", "a drug", ("zv", "zorva"))
    pairs = list(definition_pairs([entry], ("What is {term}?",), 3, seed=0))
    assert pairs[0] == ("zorvatide", "a drug") and len(pairs) == 3 and {d for _, d in pairs} == {"a drug"}
    assert {q for q, _ in pairs[1:]} <= {"zv", "zorva", "What is zorvatide?", "What is zv?", "What is zorva?"}
    assert len({q for q, _ in pairs}) == 3
    assert pairs == list(definition_pairs([entry], ("What is {term}?",), 3, seed=0))  # seeded
    assert sorted(definition_pairs([entry], (), 9, seed=0)) == [("zorva", "a drug"), ("zorvatide", "a drug"),
                                                                ("zv", "a drug")]  # as many as there are names
    assert list(definition_pairs([entry], ("What is {term}?",), 1, seed=0)) == [("zorvatide", "a drug")]


def test_single_words_are_the_one_word_names():
    entries = [GlossaryEntry("Atrial Fibrillation", "x", ("AF",)), GlossaryEntry("zorvatide", "y")]
    words = single_words(entries, lambda name: name.lower().split())
    assert words == {"af": entries[0], "zorvatide": entries[1]}


def test_the_real_mesh_extract_reads():
    path = ROOT / "bench" / "data" / "mesh" / "desc_subset.xml.gz"
    with gzip.open(path, "rb") as fh:
        dropped = {}
        entries = list(dedupe(mesh_entries(fh, str(path)), dropped))
    assert len(entries) > 1000
    asthma = next(e for e in entries if e.term == "Asthma")
    assert "airway" in asthma.definition.lower() and "Bronchial Asthma" in asthma.synonyms


def test_used_entries_are_those_the_texts_name_as_whole_words():
    entries = [GlossaryEntry("Atrial Fibrillation", "x", ("AF",)), GlossaryEntry("zorvatide", "y"),
               GlossaryEntry("Fibrillation", "z"), GlossaryEntry("keltrase", "w")]
    texts = ["Patients with atrial fibrillation were seen.", "No keltrases here, nor zorvatides."]
    assert used_entries(entries, texts) == entries[:1] + entries[2:3]  # plurals are other words
    assert used_entries(entries, ["An AF episode."]) == entries[:1]  # by a synonym


def test_nlm_s_own_descriptor_file_reads_with_its_doctype_and_every_element():
    path = FIXTURES / "desc2014_head_sample.xml.gz"
    with gzip.open(path, "rb") as fh:
        got = list(mesh_entries(fh, str(path)))
    entries = [e for e, _ in got if e is not None]
    assert len(got) == 63 and len(entries) == 58 and [r for _, r in got].count("no_scope_note") == 5
    calcimycin = entries[0]
    assert calcimycin.term == "Calcimycin" and calcimycin.definition.startswith("An ionophorous, polyether antibiotic")
    assert "A-23187" in calcimycin.synonyms and "A23187, Antibiotic" not in calcimycin.synonyms  # no permuted form
