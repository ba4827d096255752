#!/usr/bin/env python3
"""Convert CTD's MEDIC disease vocabulary (CTD_diseases.tsv[.gz]) to MeSH descriptor XML.

MEDIC is MeSH's disease branches (C, F03) merged with OMIM. For every row whose
DiseaseID is a MeSH *descriptor* (``MESH:D...``) this writes one NLM-shaped record:

    <DescriptorRecordSet LanguageCode="eng">
      <DescriptorRecord DescriptorClass="1">
        <DescriptorUI>D001249</DescriptorUI>
        <DescriptorName><String>Asthma</String></DescriptorName>
        <TreeNumberList><TreeNumber>C08.127.108</TreeNumber>...</TreeNumberList>
        <ConceptList>
          <Concept PreferredConceptYN="Y">
            <ScopeNote>A form of bronchial disorder ...</ScopeNote>   (CTD "Definition")
            <TermList>
              <Term ConceptPreferredTermYN="Y" RecordPreferredTermYN="Y"><String>Asthma</String></Term>
              <Term><String>Asthma, Bronchial</String></Term> ...      (CTD "Synonyms")
            </TermList>
          </Concept>
        </ConceptList>
      </DescriptorRecord>

CTD does not say which MeSH concept a synonym belongs to, so all entry terms go under the
preferred concept. Rows that CTD merged with an OMIM record (``OMIM:`` in AltDiseaseIDs)
also carry OMIM titles; for those rows synonyms with no lower-case letter that contain
white space or a digit (OMIM titles such as "ASTHMA, SUSCEPTIBILITY TO" and locus symbols
such as "HMSN1A") are dropped. MESH:C (supplementary concept) and OMIM rows are skipped.

Standard library only.  Usage:
    python convert_ctd_medic_to_mesh_xml.py CTD_diseases.tsv.gz desc_extract.xml
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from xml.sax.saxutils import escape

FIELDS = ["DiseaseName", "DiseaseID", "AltDiseaseIDs", "Definition", "ParentIDs",
          "TreeNumbers", "ParentTreeNumbers", "Synonyms", "SlimMappings"]


def omim_like(term: str) -> bool:
    """An upper-case OMIM title or locus symbol rather than a MeSH entry term."""
    if re.search(r"[a-z]", term):
        return False
    return bool(re.search(r"\s", term) or re.search(r"\d", term))


def rows(path: str):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#") or not line.strip():
                continue
            values = line.rstrip("\n").split("\t")
            values += [""] * (len(FIELDS) - len(values))
            yield dict(zip(FIELDS, values, strict=False))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="CTD_diseases.tsv or .tsv.gz")
    ap.add_argument("out_xml")
    args = ap.parse_args(argv)

    n = n_notes = n_terms = n_dropped = 0
    with open(args.out_xml, "w", encoding="utf-8") as out:
        out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
        out.write('<DescriptorRecordSet LanguageCode="eng">\n')
        for r in rows(args.source):
            if not r["DiseaseID"].startswith("MESH:D"):
                continue
            ui = r["DiseaseID"][len("MESH:"):]
            name = r["DiseaseName"].strip()
            merged_omim = "OMIM:" in r["AltDiseaseIDs"]
            terms, seen = [], {name}
            for s in (x.strip() for x in r["Synonyms"].split("|")):
                if not s or s in seen:
                    continue
                if merged_omim and omim_like(s):
                    n_dropped += 1
                    continue
                seen.add(s)
                terms.append(s)
            note = r["Definition"].strip()
            n += 1
            n_notes += bool(note)
            n_terms += len(terms)
            out.write('<DescriptorRecord DescriptorClass="1">\n')
            out.write(f"  <DescriptorUI>{escape(ui)}</DescriptorUI>\n")
            out.write(f"  <DescriptorName><String>{escape(name)}</String></DescriptorName>\n")
            trees = [t for t in r["TreeNumbers"].split("|") if t]
            if trees:
                out.write("  <TreeNumberList>"
                          + "".join(f"<TreeNumber>{escape(t)}</TreeNumber>" for t in trees)
                          + "</TreeNumberList>\n")
            out.write('  <ConceptList>\n    <Concept PreferredConceptYN="Y">\n')
            if note:
                out.write(f"      <ScopeNote>{escape(note)}</ScopeNote>\n")
            out.write("      <TermList>\n")
            out.write('        <Term ConceptPreferredTermYN="Y" RecordPreferredTermYN="Y">'
                      f"<String>{escape(name)}</String></Term>\n")
            for t in terms:
                out.write(f"        <Term><String>{escape(t)}</String></Term>\n")
            out.write("      </TermList>\n    </Concept>\n  </ConceptList>\n")
            out.write("</DescriptorRecord>\n")
        out.write("</DescriptorRecordSet>\n")
    print(f"descriptors={n} with_scope_note={n_notes} entry_terms(excl. name)={n_terms} "
          f"omim_like_synonyms_dropped={n_dropped}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
