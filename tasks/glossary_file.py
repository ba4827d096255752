"""A glossary file read into entries, and the files a run writes from them (the rules of
:mod:`mosaic_core.data.glossary`, the bytes of :mod:`storage.glossary`). Imports no Prefect and
no torch: ``mosaic run`` checks a glossary with it before anything heavy is imported."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import asdict, replace
from pathlib import Path

from mosaic_core.config import GlossaryConfig
from mosaic_core.data.glossary import (CODE_VERSION, GlossaryEntry, NotAGlossary, dedupe, definition_pairs,
                                       dictionary_texts, glossary_entry, mesh_entries, used_entries)
from storage.glossary import (DICTIONARY, ENTRIES, PAIRS, file_digest, glossary_dir, local_glossary, read_jsonl,
                              starts_with_markup, table_rows, write_record)
from storage.pairs_io import CorpusError, open_binary, write_jsonl
from storage.sources import is_remote

log = logging.getLogger(__name__)


def is_mesh(path: Path, cfg: GlossaryConfig) -> bool:
    """Whether the glossary file is read as MeSH descriptor XML: ``cfg.format`` says so, or (auto)
    the file is XML."""
    return cfg.format == "mesh" or (cfg.format == "auto" and starts_with_markup(path))


def read_glossary(path: Path, cfg: GlossaryConfig, dropped: dict[str, int]) -> Iterator[GlossaryEntry]:
    """The entries of the glossary file ``path``, streamed, the first of each term only; every
    record that is no entry is counted in ``dropped`` by its reason (a table's unreadable rows too:
    ``invalid_json``, ``not_utf8``, ``too_long``). A file that is no glossary is a
    :class:`CorpusError` naming it."""
    if not is_mesh(path, cfg):
        rows = table_rows(path, (cfg.term_column, cfg.definition_column), (cfg.synonyms_column, cfg.examples_column),
                          dropped)
        yield from dedupe((glossary_entry(r[cfg.term_column], r[cfg.definition_column], r.get(cfg.synonyms_column),
                                          r.get(cfg.examples_column)) for r in rows), dropped)
        return
    from lxml import etree

    try:
        with open_binary(path) as stream:
            yield from dedupe(mesh_entries(stream, str(path)), dropped)
    except NotAGlossary as exc:
        raise CorpusError(str(exc)) from exc
    except (etree.XMLSyntaxError, OSError) as exc:
        raise CorpusError(f"{path}: cannot be read as MeSH descriptor XML ({str(exc).splitlines()[0]}); give "
                          "descYYYY.xml as NLM publishes it, or a JSONL, CSV or TSV glossary (format: table)") from exc


def check_glossary(cfg: GlossaryConfig) -> None:
    """A local glossary file exists and reads as the glossary it is taken for (its columns, or a
    MeSH root and first record), checked before a run starts; a :class:`CorpusError` naming it
    otherwise. A URL is checked when it is downloaded."""
    if not is_remote(cfg.path):
        next(read_glossary(local_glossary(cfg.path, None), cfg, {}), None)


def read_entries(path: str | Path) -> Iterator[GlossaryEntry]:
    """The entries of an ``entries.jsonl`` file (:func:`write_glossary`'s), in order."""
    for row in read_jsonl(path):
        yield GlossaryEntry(row["term"], row["definition"], tuple(row["synonyms"]), tuple(row["examples"]))


def glossary_identity(cfg: GlossaryConfig, data_root: str | Path, corpus: str | None) -> dict:
    """What the glossary files of a run are made from: the glossary file's digest, the settings,
    the code version, and the corpus digest ``corpus`` when only the entries it uses are kept.
    Downloads the glossary first when it is a URL."""
    path = local_glossary(cfg.path, data_root)
    return {"source": str(path), "digest": file_digest(path), "config": cfg.config_hash(), "code": CODE_VERSION,
            "corpus": corpus if cfg.used_only else None}


def write_glossary(cfg: GlossaryConfig, data_root: str | Path, identity: dict,
                   corpus_texts: Iterable[str] | None = None) -> dict:
    """Read the glossary and write its files into the data root (``storage.glossary``), only its
    entries that ``corpus_texts`` name when ``cfg.used_only`` (:func:`used_entries`); returns the
    record: entries kept, records dropped by reason (``unused``: named nowhere in the corpus),
    dictionary texts, definition pairs."""
    folder, dropped = glossary_dir(data_root), {}
    path = Path(identity["source"])
    read = list(read_glossary(path, cfg, dropped))
    kept = used_entries(read, corpus_texts) if cfg.used_only and corpus_texts is not None else read
    if len(kept) < len(read):
        dropped["unused"] = len(read) - len(kept)
    if not kept:
        raise CorpusError(f"{path}: no usable glossary entry (dropped: {dropped or 'none'}); each needs a term and "
                          "a definition" + (", and the corpus must name it (glossary.used_only)" if read else ""))
    entries = write_jsonl(folder / ENTRIES, (asdict(e) for e in kept))
    trimmed = [replace(e, synonyms=e.synonyms[:cfg.max_synonyms]) for e in kept]
    texts = write_jsonl(folder / DICTIONARY, ({"query": t, "document": d} for t, d in dictionary_texts(
        trimmed, cfg.dictionary.templates, cfg.dictionary.texts_per_term, cfg.dictionary.seed)))
    pairs = write_jsonl(folder / PAIRS, ({"query": q, "document": d} for q, d in definition_pairs(
        trimmed, cfg.questions, cfg.definition_pairs, cfg.seed)))
    log.info("glossary %s: %d entries kept, dropped %s; %d dictionary texts, %d definition pairs", path, entries,
             dropped or "none", texts, pairs)
    return write_record(data_root, {"identity": identity, "entries": entries, "dropped": dropped,
                                    "dictionary_texts": texts, "definition_pairs": pairs})
