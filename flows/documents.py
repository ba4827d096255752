"""The documents source: a domain given as documents alone. Their passages become (query, passage)
pairs (titles, inverse cloze, cropping, generated queries: ``source.builders``), which are imported
and filtered as a user's own pairs are; the rest of the pipeline reads them the same way."""

from __future__ import annotations

from prefect.artifacts import create_markdown_artifact

from flows.own_pairs import own_pairs
from mosaic_core.config import DocumentsSource, OwnPairsSource, PipelineConfig
from storage.lock import root_lock
from storage.manifest import Manifest
from tasks.documents import build_document_pairs


def document_pairs(source: DocumentsSource, cfg: PipelineConfig,
                   data_root: str) -> tuple[list[Manifest], list[Manifest]]:
    """(import manifests, filter manifests) of the pairs built from ``source``'s documents, in ``data_root``."""
    with root_lock(data_root, "documents flow"):
        built = build_document_pairs(source, data_root)
    made = ", ".join(f"{builder} {n:,}" for builder, n in built["pairs"].items())
    create_markdown_artifact(
        key="document-pairs", description=f"Pairs built from {source.path}",
        markdown=f"{built['documents']['documents']:,} documents → {built['built']['passages']:,} passages → "
                 f"pairs: {made}. Skipped: {built['built']['skipped'] or 'none'}; documents skipped: "
                 f"{built['documents']['skipped'] or 'none'}.")
    return own_pairs(OwnPairsSource(path=built["path"]), cfg, data_root)
