"""Typed, frozen configuration of the data steps: prompts, PubMed pairs, ingest, the filter and
the other pair sources (re-exported by :mod:`mosaic_core.config`)."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import Field, model_validator

from mosaic_core.config_base import DEFAULT_BASE, Frozen

NCBI_PUBMED_URL = "https://ftp.ncbi.nlm.nih.gov/pubmed/"


class PromptsConfig(Frozen):
    """The prefixes a model expects before a query and before a document (e.g. nomic-embed-text's
    ``search_query: `` / ``search_document: ``; e5's ``query: `` / ``passage: ``)."""

    query: str = Field("", description="Put before every query the model encodes.")
    document: str = Field("", description="Put before every document (and hard negative) the model encodes.")

    @model_validator(mode="before")
    @classmethod
    def _none_is_no_prompt(cls, data: object) -> object:
        return {} if data is False or (isinstance(data, str) and data.lower() == "none") else data


class PairConfig(Frozen):
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
    language_prefix_chars: int = Field(
        300, gt=0, description="Characters of title + abstract the language detector reads when the text does "
        "not look English at once.")
    language_seed: int = Field(0, description="Seed of the language detector (langdetect), so its answer is "
                               "deterministic.")


class IngestConfig(Frozen):
    """Where the snapshot comes from and how it becomes pairs."""

    source: str = Field(
        NCBI_PUBMED_URL,
        description="Local directory, glob of *.xml[.gz], or an HTTP(S) base laid out like NCBI's pubmed/.",
    )
    subsets: tuple[Literal["baseline", "updatefiles"], ...] = Field(
        ("baseline", "updatefiles"), description="Which folders of the snapshot to read: the annual baseline, the "
        "daily update files, or both.")
    max_files: int | None = Field(None, gt=0, description="Take only the first N files (smoke runs).")
    pairs: PairConfig = Field(PairConfig(), description="How a citation becomes a pair, and which pairs are kept.")
    batch_rows: int = Field(5000, gt=0, description="Rows per Parquet row group while streaming.")


class NegativeRule(Frozen):
    """Which retrieved documents may serve as a pair's hard negatives: never its own document (or
    an exact copy), never one scoring at or above the positive (likely another answer to the query,
    a false negative) or, with ``margin`` below 1, at or above that fraction of the positive's score
    (NV-Retriever's TopK-PercPos uses 0.95), never a near duplicate of the positive (an exact copy
    never is one). Both tests are off by default: at 0.95 the margin cost both the adapted model
    and the control 5-6 held-out points on the demo, and the duplicate test at 0.98 left out no
    negative on the real biomedical pairs that the margin did not, two on the demo, and every one
    with a model whose embeddings barely differ (docs/benchmarks.md, "Hard negatives that are not
    positives")."""

    margin: float = Field(1.0, gt=0.0, le=1.0, description="A negative must score below this fraction of the "
                          "pair's own positive score (1.0: anything below the positive; NV-Retriever: 0.95).")
    duplicate_cosine: float = Field(1.0, gt=0.0, le=1.0, description="A document whose embedding has at least "
                                    "this cosine with the positive's is a near duplicate, never a negative "
                                    "(1.0: exact copies only, which never are; e.g. 0.98 for a sentence encoder).")


class FilterConfig(Frozen):
    """Stage 0b: the consistency filter (or the threshold filter of the low-resource recipe)."""

    model: str = Field(DEFAULT_BASE, description="Filter model: hub id, path or offline alias.")
    prompts: PromptsConfig | None = Field(
        None, description="The filter model's query and document prompts "
        "(None: the ones the filter model declares in its sentence-transformers config; "
        "'none': no prompt).")
    mode: Literal["consistency", "threshold"] = Field(
        "consistency", description="consistency: keep a pair when its own document is in its query's top k; "
        "threshold: keep it when the cosine of query and document is at least threshold.")
    k: int = Field(2, ge=1, description="Keep a pair iff its document is in its query's top k.")
    threshold: float | None = Field(None, ge=-1.0, le=1.0, description="Threshold mode: keep cos >= t.")
    chunk_size: int = Field(1_000_000, gt=0, description="Pairs per FAISS index (consistency mode).")
    hard_negatives: int = Field(
        3, ge=0, description="Consistency mode: keep per pair this many of its highest-ranked other documents that "
        "score below its own (hard negatives for training), as negative_rule allows.")
    negative_rule: NegativeRule = Field(NegativeRule(), description="Which documents may be hard negatives.")
    query_max_length: int = Field(64, gt=0, description="Queries are cut after this many tokens.")
    document_max_length: int = Field(256, gt=0, description="Documents are cut after this many tokens.")
    batch_size: int = Field(64, gt=0, description="Texts per encoding batch (CPU).")
    batch_tokens: int | None = Field(
        None, gt=0, description="Padded tokens per encoding batch instead of batch_size texts (length-sorted "
        "texts, as many as fit; halved on out-of-memory). Default: batch_size texts on CPU, 131,072 tokens on CUDA.")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="auto: bf16 autocast on CUDA and on CPUs with native bf16, else fp32.")
    backend: Literal["torch", "onnx", "onnx-int8"] = Field(
        "torch", description="How the filter model encodes: torch (precision applies), or on CPU through its "
        "ONNX export (fp32, or int8 weights), made once into the data root's cache/onnx and verified "
        "against PyTorch; needs pip install -e '.[export]'. The default stays torch: on the 2-core CPU measured "
        "(bench/filter.py, MiniLM, real biomed pairs) neither ONNX backend reached the goal of 2x "
        "SentenceTransformer.encode fp32 (decisions were identical; speed 0.6-0.8x on 100 pairs).")
    query_column: str = Field("query", description="Column of a pairs file that holds the queries.")
    document_column: str = Field("document", description="Column of a pairs file that holds the documents.")

    @model_validator(mode="after")
    def _threshold_needs_value(self) -> FilterConfig:
        if self.mode == "threshold" and self.threshold is None:
            raise ValueError("mode 'threshold' needs a threshold (e.g. --threshold 0.6)")
        return self

    def encoding_hash(self) -> str:
        """What the embeddings depend on (not k or the threshold): re-filtering reuses them."""
        fields = {"model", "prompts", "query_max_length", "document_max_length", "precision"}
        if self.backend != "torch":  # the default leaves the hashes of earlier roots (their embeddings) as they were
            fields.add("backend")
        blob = json.dumps(self.model_dump(mode="json", include=fields), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


class IslamicConfig(Frozen):
    """The low-resource domain's source: Qur'an verse pairs linked by Tafsir cross-references
    (``mosaic_core.data.islamic``), kept at a cosine threshold, in place of PubMed ingest and the
    consistency filter; the run is also scored on the held-out verse-to-verse task."""

    quran: str = Field(..., description="Sahih International translation, 'sura|aya|text' lines.")
    tafsir: str = Field(..., description="Tafsir Ibn Kathir blocks, JSONL {id, surah, ayah_start, ayah_end, text}.")
    threshold: float = Field(0.5, description="Keep a verse pair when the filter model's cosine is at least this.")

    def filter_config(self, model: str) -> FilterConfig:
        """How the candidates are scored: threshold mode, and verses are long queries."""
        return FilterConfig(model=model, mode="threshold", threshold=self.threshold, query_max_length=256)


class OwnPairsConfig(Frozen):
    """Any domain from your own (query, document) pairs: question and answer, title and body,
    claim and evidence. They go through what PubMed pairs go through, from these rules on."""

    path: str = Field(..., description="A JSONL/JSON, Parquet or CSV/TSV file (compressed or not), a folder or glob "
                      "of them, or a Hugging Face save_to_disk folder; relative to the config file's folder. Or a "
                      "dataset on the Hugging Face hub: hf://datasets/OWNER/NAME[@REVISION][/GLOB] (or OWNER/NAME "
                      "when no such local path exists), fetched into the hub's cache.")
    query_column: str = Field("query", min_length=1, description="The column of the short text (the query).")
    document_column: str = Field("document", min_length=1, description="The column of the longer text.")
    min_query_words: int = Field(1, ge=0, description="Drop pairs whose query has fewer words.")
    min_document_words: int = Field(5, ge=0, description="Drop pairs whose document has fewer words.")
    max_document_words: int = Field(2000, gt=0, description="Drop pairs whose document has more words.")
    keep_languages: tuple[str, ...] | None = Field(
        None, description="ISO 639-1 codes the language filter keeps (e.g. [en]); unset: no language filter.")
    partition_rows: int = Field(100_000, gt=0, description="Pairs per Parquet partition (and per filter task).")


class DictionaryConfig(Frozen):
    """The dictionary stage (seed 003, experiment 4): the domain-restricted MLM on dictionary-style
    text built from the glossary, after the MLM warm-up and before the retrieval stages; the
    encoder stays frozen, the MLM head and the domain tokens' rows train."""

    epochs: int = Field(10, ge=0, description="Passes over the dictionary texts (0: no dictionary stage); seed 003 "
                        "trained 50.")
    max_steps: int | None = Field(1000, gt=0, description="At most this many optimizer steps, however many terms.")
    batch_size: int = Field(16, gt=0, description="Dictionary texts per step.")
    lr: float = Field(5e-4, gt=0.0, description="Learning rate (constant).")
    mlm_probability: float = Field(
        0.5, gt=0.0, lt=1.0, description="Chance a domain token of a dictionary text is masked (the texts are short "
        "and hold few domain tokens: mostly the term itself).")
    texts_per_term: int = Field(4, gt=0, description="Dictionary texts written per term, each in another template; "
                                "plus one per synonym and one per example sentence.")
    templates: tuple[str, ...] = Field(
        ("{term}: {definition}", "{term} is defined as follows. {definition}", "The term {term} means: {definition}",
         "{definition} This is called {term}.", "What is {term}? {definition}"), min_length=1,
        description="How a dictionary text is written: {term} (the term or one of its synonyms) and {definition}.")
    seed: int = Field(0, description="Seed of the templates drawn and of the stage's data order and masks.")

    @model_validator(mode="after")
    def _templates_name_both(self) -> DictionaryConfig:
        for template in self.templates:
            if "{term}" not in template or "{definition}" not in template:
                raise ValueError(f"dictionary template {template!r} must hold both {{term}} and {{definition}}")
        return self


class GlossaryConfig(Frozen):
    """A glossary of the domain: its terms' definitions teach the adapted model the terms
    (docs/concepts/glossary.md). Stage 1 adds the terms the base tokenizer splits on less
    evidence than other candidates and initialises their rows from their definitions; the
    dictionary stage trains the MLM on their definitions; the definition pairs join both arms'
    training pairs."""

    path: str = Field(..., min_length=1, description="A JSONL/JSON, CSV or TSV file of term, definition (and optional "
                      "synonyms, examples) columns, or NLM's MeSH descriptor XML (descYYYY.xml, .gz too); a local "
                      "path (relative to the config file's folder) or an http(s) URL, downloaded into the data root "
                      "once and verified against its .md5 when one is published.")
    format: Literal["auto", "table", "mesh"] = Field(
        "auto", description="auto: MeSH descriptor XML when the file (decompressed) starts with '<', a table "
        "otherwise.")
    term_column: str = Field("term", min_length=1, description="Table column of the term.")
    definition_column: str = Field("definition", min_length=1, description="Table column of the definition.")
    synonyms_column: str = Field("synonyms", min_length=1, description="Table column of other names of the term "
                                 "(a list, or text separated by ';' or '|'); optional.")
    examples_column: str = Field("examples", min_length=1, description="Table column of sentences using the term "
                                 "(a list, or text separated by ';' or '|'); optional.")
    used_only: bool = Field(True, description="Keep only the entries whose term or a synonym occurs in the "
                            "corpus (stage 1's sample of it, vocab.sample_texts): MeSH has ~30,000 descriptors, most "
                            "of them foreign to any one corpus.")
    max_synonyms: int = Field(3, ge=0, description="The dictionary texts and definition pairs of an entry use at "
                              "most this many of its synonyms (the first ones; MeSH lists up to dozens of variants).")
    min_count: int = Field(2, ge=1, description="Stage 1 adds a one-word term (or synonym) that the base tokenizer "
                           "splits when the corpus uses it at least this often (other candidates need "
                           "vocab.min_count), and never prunes it.")
    define_steps: int = Field(
        200, ge=0, description="Stage 1 then trains the glossary tokens' rows for this many steps so that the "
        "expanded model reads a sentence holding a term as the base model reads it with the term's definition beside "
        "it, not as it reads the term's meaningless pieces (0: they are distilled like the other new rows).")
    definition_pairs: int = Field(
        2, ge=0, description="Definition pairs per term added to the training pairs of the adapted model and of "
        "the control alike: the term → its definition, then synonyms or a question about it → its definition "
        "(0: none).")
    questions: tuple[str, ...] = Field(
        ("What is {term}?", "What does {term} mean?"), description="Definition pairs: one of these questions about "
        "each term is a query of its definition too ({term}: the term or a synonym); empty: none.")
    dictionary: DictionaryConfig = Field(DictionaryConfig(), description="The dictionary stage.")
    seed: int = Field(0, description="Seed of the questions drawn.")
