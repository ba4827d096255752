#!/usr/bin/env python3
"""Subset a MeSH descriptor XML file to the descriptors that occur in a text corpus.

SOURCE is NLM's descriptor XML (descYYYY.xml, optionally .gz; root <DescriptorRecordSet>)
or any file of the same shape. It is streamed with lxml.etree.iterparse and every
<DescriptorRecord> is cleared after use, so the full ~300 MB file needs little memory:
only a slim copy of each record (UI, name, concepts with their scope notes and terms) is
kept.

A descriptor is kept when its name or one of its entry terms (the <Term><String> of any of
its concepts) occurs in the corpus as whole words, case-insensitively. Matching is on
token sequences: text and terms are Unicode-normalised (NFKC, curly quotes and dashes made
ASCII), case-folded and split into word tokens (\\w+) and single punctuation characters,
so "Abdomen, Acute" matches "abdomen, acute" but not "abdomen acute". Exception: a term
with no lower-case letter (an acronym such as "AIDS", "ALL", "WAS", "AS") is matched
case-sensitively, otherwise the entry terms "WAS" (Wiskott-Aldrich Syndrome) or "AN"
(Anorexia Nervosa) would match the words "was" and "an"; --acronyms-any-case turns this
off. If fewer than --min-keep descriptors match, all descriptors are written.

The output holds only: DescriptorRecord (DescriptorClass kept), DescriptorUI,
DescriptorName/String, ConceptList/Concept (PreferredConceptYN kept), ScopeNote and
TermList/Term/String (the Term attributes ConceptPreferredTermYN, IsPermutedTermYN and
RecordPreferredTermYN kept where present).

Usage:
    python build_mesh_subset.py SOURCE OUT_XML --corpus FILE.jsonl [--corpus FILE2.jsonl]
           [--fields title abstract text] [--min-keep 0] [--min-term-chars 1]
           [--acronyms-any-case] [--report matches.tsv]

Each corpus line is a JSON object; the values of --fields that are present are joined.
Requires lxml (and the standard library).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import unicodedata
from collections import defaultdict

from lxml import etree

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
ASCII_MAP = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"',
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-",
    "\u2212": "-", "\u00ad": "",
})
TERM_ATTRS = ("ConceptPreferredTermYN", "IsPermutedTermYN", "RecordPreferredTermYN")


def tokens(text: str, fold: bool = True) -> tuple[str, ...]:
    text = unicodedata.normalize("NFKC", text).translate(ASCII_MAP)
    if fold:
        text = text.casefold()
    return tuple(TOKEN_RE.findall(text))


def is_acronym(term: str) -> bool:
    """A term with letters but no lower-case letter, e.g. "AIDS", "ALL", "WAS"."""
    return any(ch.isalpha() for ch in term) and not any(ch.islower() for ch in term)


def text_of(elem) -> str | None:
    if elem is None or elem.text is None:
        return None
    return elem.text.strip() or None


def read_descriptors(path: str):
    """Yield slim records from a descriptor XML file, streaming.

    A record is (attrs, ui, name, concepts); concepts is a list of
    (preferred_yn, scope_note or None, [(term_string, {attr: value})]).
    """
    src = gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
    with src:
        ctx = etree.iterparse(src, events=("end",), tag="DescriptorRecord",
                              load_dtd=False, no_network=True, resolve_entities=False,
                              huge_tree=True, remove_blank_text=True)
        for _, rec in ctx:
            ui = text_of(rec.find("DescriptorUI"))
            name = text_of(rec.find("DescriptorName/String"))
            concepts = []
            for concept in rec.iterfind("ConceptList/Concept"):
                terms = []
                for term in concept.iterfind("TermList/Term"):
                    s = text_of(term.find("String"))
                    if s:
                        terms.append((s, {a: term.get(a) for a in TERM_ATTRS
                                          if term.get(a) is not None}))
                concepts.append((concept.get("PreferredConceptYN"),
                                 text_of(concept.find("ScopeNote")), terms))
            attrs = {k: v for k, v in rec.attrib.items() if k == "DescriptorClass"}
            # free the finished record and the already-processed siblings
            rec.clear()
            parent = rec.getparent()
            if parent is not None:
                while rec.getprevious() is not None:
                    del parent[0]
            if ui and name:
                yield attrs, ui, name, concepts
        del ctx


def iter_corpus(paths, fields):
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                obj = json.loads(line)
                yield " \n ".join(str(obj[f]) for f in fields if obj.get(f))


def write_record(xf, attrs, ui, name, concepts):
    with xf.element("DescriptorRecord", attrs):
        el = etree.Element("DescriptorUI")
        el.text = ui
        xf.write(el)
        dn = etree.Element("DescriptorName")
        etree.SubElement(dn, "String").text = name
        xf.write(dn)
        cl = etree.Element("ConceptList")
        for pref, note, terms in concepts:
            c = etree.SubElement(cl, "Concept",
                                 {"PreferredConceptYN": pref} if pref else {})
            if note:
                etree.SubElement(c, "ScopeNote").text = note
            if terms:
                tl = etree.SubElement(c, "TermList")
                for s, tattrs in terms:
                    t = etree.SubElement(tl, "Term", tattrs)
                    etree.SubElement(t, "String").text = s
        xf.write(cl)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="descriptor XML (descYYYY.xml, .xml.gz, or same shape)")
    ap.add_argument("out_xml", help="output descriptor XML")
    ap.add_argument("--corpus", action="append", required=True,
                    help="JSONL corpus file; repeat for several")
    ap.add_argument("--fields", nargs="+", default=["title", "abstract", "text"],
                    help="JSON fields holding text (default: title abstract text)")
    ap.add_argument("--min-keep", type=int, default=0,
                    help="if fewer descriptors than this match, write all of them")
    ap.add_argument("--min-term-chars", type=int, default=1,
                    help="ignore names/terms shorter than this many characters")
    ap.add_argument("--acronyms-any-case", action="store_true",
                    help="match all-upper-case terms case-insensitively too")
    ap.add_argument("--report", help="optional TSV: UI, name, matched term, documents")
    args = ap.parse_args(argv)

    # 1. stream the descriptors, keeping slim records and an index of their terms
    records = []
    # two indexes: case-folded terms, and (unless --acronyms-any-case) exact-case acronyms;
    # keys are (case_sensitive, token tuple)
    term_owner: dict[tuple[bool, tuple[str, ...]], set[int]] = defaultdict(set)
    lengths_by_first: dict[bool, dict[str, set[int]]] = {False: defaultdict(set),
                                                         True: defaultdict(set)}
    n_notes = n_terms = 0
    for i, (attrs, ui, name, concepts) in enumerate(read_descriptors(args.source)):
        records.append((attrs, ui, name, concepts))
        n_notes += any(note for _, note, _ in concepts)
        strings = {name}
        for _, _, terms in concepts:
            for s, _ in terms:
                strings.add(s)
        n_terms += len(strings - {name})
        for s in strings:
            if len(s) < args.min_term_chars:
                continue
            exact = is_acronym(s) and not args.acronyms_any_case
            tok = tokens(s, fold=not exact)
            if tok:
                term_owner[exact, tok].add(i)
                lengths_by_first[exact][tok[0]].add(len(tok))

    # 2. scan the corpus once for every indexed term
    hits: dict[tuple[bool, tuple[str, ...]], int] = defaultdict(int)
    n_docs = 0
    for doc in iter_corpus(args.corpus, args.fields):
        n_docs += 1
        found = set()
        for exact in (False, True):
            by_first = lengths_by_first[exact]
            if not by_first:
                continue
            toks = tokens(doc, fold=not exact)
            for pos, tok in enumerate(toks):
                lens = by_first.get(tok)
                if not lens:
                    continue
                for ln in lens:
                    cand = (exact, toks[pos:pos + ln])
                    if len(cand[1]) == ln and cand in term_owner:
                        found.add(cand)
        for cand in found:
            hits[cand] += 1

    matched: dict[int, tuple[tuple[bool, tuple[str, ...]], int]] = {}
    for cand, ndoc in hits.items():
        for i in term_owner[cand]:
            best = matched.get(i)
            if best is None or ndoc > best[1]:
                matched[i] = (cand, ndoc)

    keep_all = len(matched) < args.min_keep
    keep = range(len(records)) if keep_all else sorted(matched)

    # 3. write the kept records in input order, incrementally
    with open(args.out_xml, "wb") as out, etree.xmlfile(out, encoding="utf-8") as xf:
        xf.write_declaration()
        with xf.element("DescriptorRecordSet", {"LanguageCode": "eng"}):
            for i in keep:
                xf.write("\n")
                write_record(xf, *records[i])
            xf.write("\n")

    if args.report:
        with open(args.report, "w", encoding="utf-8") as rep:
            rep.write("DescriptorUI\tDescriptorName\tmatched_term_tokens\tdocuments\n")
            for i in sorted(matched):
                cand, ndoc = matched[i]
                rep.write(f"{records[i][1]}\t{records[i][2]}\t{' '.join(cand[1])}\t{ndoc}\n")

    kept_notes = sum(any(n for _, n, _ in records[i][3]) for i in keep)
    print(f"descriptors_read={len(records)} with_scope_note={n_notes} "
          f"entry_terms={n_terms} corpus_docs={n_docs} matched={len(matched)} "
          f"written={len(keep)} written_with_scope_note={kept_notes}"
          + (" (fewer than --min-keep matched: wrote all)" if keep_all else ""),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
