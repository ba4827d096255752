"""Prefect task of a documents source: documents → passages → (query, passage) pairs, written to
``DATA_ROOT/documents/pairs.jsonl`` for the own-pairs import (:mod:`mosaic_core.data.documents`,
:mod:`mosaic_core.data.query_gen`, :mod:`storage.documents`).

Cached on the documents' content, the source's settings and the builders' code: an unchanged
source is not read again, and the pairs file keeps its bytes, so the import and the filter rerun
nothing either. The cached record is used only while the pairs file it describes is the one
written (its size and time), so a deleted or replaced file is built again."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

from prefect import task
from prefect.context import TaskRunContext

from mosaic_core.config import PipelineConfig
from mosaic_core.config_documents import DocumentsConfig
from mosaic_core.data.documents import BuildStats, Pair, document_pairs
from mosaic_core.modeling.refs import check_cross_encoder, check_model, resolve_model
from mosaic_core.versioning import code_version
from storage.documents import DocumentStats, check_documents, iter_documents, write_pairs
from storage.layout import DataLayout
from storage.own_pairs import content_hash
from storage.parquet import write_atomic_bytes
from tasks.keys import cache_key
from tasks.results import SERIALIZER, json_only, verified

log = logging.getLogger(__name__)


def check_documents_at_hand(source: DocumentsConfig, cfg: PipelineConfig) -> None:
    """What is wrong with a documents source, found before a run starts: its files (readable, the
    text column in each structured one) and its models (a generator, a cross-encoder)."""
    check_documents(source.path, source.text_column)
    if source.generator is not None:
        check_model(source.generator)
    if source.cross_encoder is not None:
        check_cross_encoder(source.cross_encoder)


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


@json_only
def _build_key(context: TaskRunContext, p: dict) -> str:
    cfg: DocumentsConfig = p["cfg"]
    files = check_documents(cfg.path, cfg.text_column)
    return cache_key("documents", content_hash(files), cfg.config_hash(), _code_version(),
                     str(DataLayout(p["root"]).root))


def _code_version() -> str:
    """The builders' code (generation's too), what the pairs depend on besides the documents."""
    from mosaic_core.data import documents, query_gen  # torch: imported once pairs are built, not by the CLI's check

    return code_version(documents, query_gen)


def _built_output(p: dict) -> tuple[Path, bool]:
    layout = DataLayout(p["root"])
    pairs, record = layout.document_pairs_path, layout.document_pairs_record
    try:
        written = json.loads(record.read_text())
        whole = pairs.is_file() and written.get("file") == _stamp(pairs)
    except (OSError, ValueError):
        whole = False
    return layout.results_dir, whole


def _pairs(files: list[Path], cfg: DocumentsConfig, docs: DocumentStats, stats: BuildStats) -> Iterator[Pair]:
    """Every pair of the documents, a batch of documents at a time: the model-free builders' pairs,
    then (with a generator) the generated queries of the batch's passages."""
    from mosaic_core.data.query_gen import generated_pairs, load_cross_encoder, load_generator

    generated = "generated" in cfg.builders
    device = _device() if generated else "cpu"
    generator = load_generator(resolve_model(cfg.generator), device) if generated else None
    cross = load_cross_encoder(resolve_model(cfg.cross_encoder), device) if cfg.cross_encoder else None
    for batch in iter_documents(files, cfg.text_column, cfg.title_column, cfg.id_column,
                                title_from_first_line=cfg.title_from_first_line, max_documents=cfg.max_documents,
                                stats=docs):
        passages = []
        for document in batch:
            kept, pairs = document_pairs(document, cfg, stats)
            passages += kept
            yield from pairs
        if generator is not None:
            yield from generated_pairs(passages, cfg, generator, stats, cross)


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@verified(_built_output)
@task(name="build-document-pairs", cache_key_fn=_build_key, persist_result=True, result_serializer=SERIALIZER,
      retries=0)
def build_document_pairs(cfg: DocumentsConfig, root: str) -> dict:
    """Build the pairs of the documents ``cfg.path`` names into ``root``'s documents/pairs.jsonl;
    returns where, and what the documents came to (files, documents, passages, pairs per builder,
    what each skipped and why)."""
    layout = DataLayout(root)
    files = check_documents(cfg.path, cfg.text_column)
    docs, stats = DocumentStats(), BuildStats()
    made = write_pairs(layout.document_pairs_path, _pairs(files, cfg, docs, stats))
    if not made:
        raise ValueError(f"{cfg.path}: {docs.documents:,} documents made no pair ({stats.as_dict()}); "
                         "give documents with titles for the title builder, several sentences per passage for "
                         "inverse cloze, or choose other builders")
    summary = {"path": str(layout.document_pairs_path), "documents": docs.as_dict(), "built": stats.as_dict(),
               "pairs": made}
    record = {**summary, "file": _stamp(layout.document_pairs_path)}
    write_atomic_bytes(layout.document_pairs_record, json.dumps(record, indent=1).encode())
    log.info("%s: %d documents → %d passages → %s pairs (skipped: %s)", cfg.path, docs.documents, stats.passages,
             made, stats.as_dict()["skipped"] or "none")
    return summary
