"""Typed, frozen configuration for every stage, loaded once at the edge and passed explicitly."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NCBI_PUBMED_URL = "https://ftp.ncbi.nlm.nih.gov/pubmed/"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def config_hash(self) -> str:
        """Stable 16-hex digest of every field; part of cache keys and manifests."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


class PairConfig(_Frozen):
    """How a citation becomes a (query, document) pair, and which pairs are kept."""

    append_journal: bool = Field(True, description="Append the journal title to the query.")
    append_keywords: bool = Field(True, description="Append author keywords to the query.")
    prefix_abstract_labels: bool = Field(
        False, description="Write structured abstracts as 'LABEL: text' sections."
    )
    strip_title_brackets: bool = Field(
        True,
        description="Remove the [...] PubMed puts around English translations of non-English titles.",
    )
    min_title_words: int = Field(4, ge=0, description="Drop pairs whose title has fewer words.")
    min_abstract_words: int = Field(
        30, ge=0, description="Drop pairs whose document (abstract) has fewer words."
    )
    max_abstract_words: int = Field(
        2000, gt=0, description="Drop pairs whose abstract is longer (usually full-text dumps)."
    )
    keep_languages: tuple[str, ...] = Field(
        ("en",), min_length=1, description="ISO 639-1 codes kept by the language filter."
    )
    language_prefix_chars: int = Field(300, gt=0)
    language_seed: int = 0


class IngestConfig(_Frozen):
    """Where the snapshot comes from and how it becomes pairs."""

    source: str = Field(
        NCBI_PUBMED_URL,
        description="Local directory, glob of *.xml[.gz], or an HTTP(S) base laid out like NCBI's pubmed/.",
    )
    subsets: tuple[Literal["baseline", "updatefiles"], ...] = ("baseline", "updatefiles")
    max_files: int | None = Field(None, gt=0, description="Take only the first N files (smoke runs).")
    pairs: PairConfig = PairConfig()
    batch_rows: int = Field(5000, gt=0, description="Rows per Parquet row group while streaming.")


class VocabConfig(_Frozen):
    """Stage 1: how the domain tokenizer is trained (the number of tokens added follows)."""

    base_model: str = Field(
        "thenlper/gte-base", description="Hub id, local path, or offline:all-MiniLM-L6-v2."
    )
    vocab_size: int | None = Field(
        None, gt=0, description="Domain tokenizer size; default: the base vocabulary's size."
    )
    min_frequency: int = Field(2, ge=1, description="Minimum corpus frequency of a new token.")
    heldout_every: int = Field(
        20, ge=2, description="Every n-th text is held out of training to measure fertility."
    )
    text_columns: tuple[str, ...] = Field(
        ("query", "document"), min_length=1, description="Text columns of a pairs-file corpus."
    )


class FilterConfig(_Frozen):
    """Stage 0b: the consistency filter (or the threshold filter of the low-resource recipe)."""

    model: str = Field("thenlper/gte-base", description="Filter model: hub id, path or offline alias.")
    mode: Literal["consistency", "threshold"] = "consistency"
    k: int = Field(2, ge=1, description="Keep a pair iff its document is in its query's top k.")
    threshold: float | None = Field(None, ge=-1.0, le=1.0, description="Threshold mode: keep cos >= t.")
    chunk_size: int = Field(1_000_000, gt=0, description="Pairs per FAISS index (consistency mode).")
    query_max_length: int = Field(64, gt=0)
    document_max_length: int = Field(256, gt=0)
    batch_size: int = Field(64, gt=0)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    query_column: str = "query"
    document_column: str = "document"

    @model_validator(mode="after")
    def _threshold_needs_value(self) -> FilterConfig:
        if self.mode == "threshold" and self.threshold is None:
            raise ValueError("mode 'threshold' needs a threshold (e.g. --threshold 0.6)")
        return self

    def encoding_hash(self) -> str:
        """What the embeddings depend on (not k or the threshold): re-filtering reuses them."""
        fields = ("model", "query_max_length", "document_max_length", "precision")
        blob = json.dumps({f: getattr(self, f) for f in fields}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]
