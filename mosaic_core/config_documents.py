"""Typed, frozen configuration of a domain given as documents alone (no pairs): where they are,
how they become passages, and which builders make (query, document) pairs of the passages
(:mod:`mosaic_core.data.documents`, :mod:`mosaic_core.data.query_gen`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mosaic_core.config_base import Frozen

Builder = Literal["title", "ict", "crop", "generated"]
BUILDERS: tuple[str, ...] = ("title", "ict", "crop", "generated")


class DocumentsConfig(Frozen):
    """Documents without queries, and how pairs are made of them: a document's title and its
    passage (title), a sentence and the passage around it (inverse cloze, Lee et al. 2019), two
    random spans of one passage (independent cropping, Contriever), or queries a seq2seq model
    writes for a passage (doc2query), optionally scored by a cross-encoder (GPL)."""

    path: str = Field(..., description="A folder (or glob) of .txt/.md files, one document each; or JSONL/JSON, "
                      "Parquet or CSV/TSV files (compressed or not), a folder or glob of them, or a Hugging Face "
                      "save_to_disk folder; relative to the config file's folder. Or a dataset on the Hugging Face "
                      "hub: hf://datasets/OWNER/NAME[@REVISION][/GLOB] (or OWNER/NAME when no such local path "
                      "exists), fetched into the hub's cache.")
    text_column: str = Field("text", min_length=1, description="The column of a structured file holding the text.")
    title_column: str | None = Field("title", min_length=1, description="The column holding the title, used where "
                                     "a file has it (None: no titles).")
    id_column: str | None = Field("id", min_length=1, description="The column holding a document's id, used where "
                                  "a file has it; otherwise the id is the file's name and the row's number. Ids "
                                  "seed each document's random choices.")
    title_from_first_line: bool = Field(False, description="A .txt/.md document's first line is its title (and not "
                                        "part of its text); otherwise such documents have no title.")
    passage_words: int = Field(200, ge=8, description="Passages are cut at sentence ends into about this many words "
                               "(a sentence longer than this is cut between words).")
    min_passage_words: int = Field(20, ge=1, description="A passage with fewer words (a short document, or a short "
                                   "tail that could not join its neighbour) is dropped and counted.")
    builders: tuple[Builder, ...] = Field(
        ("title", "ict"), min_length=1,
        description="Which builders make pairs. The default, title and inverse cloze, is the pair of the two whose "
        "queries look most like real ones at no model's cost: a title is a human-written summary of its passage "
        "(the relation the method's PubMed title-abstract pairs have; documents without a title are skipped and "
        "counted), and an inverse-cloze sentence is a natural-language statement that must be matched to context "
        "it is absent from (in 90% of pairs) rather than by copied words. Cropping is left out because its two "
        "random spans overlap and share words, which trains lexical matching that a strong base already has "
        "(Contriever needed it for pre-training from scratch, not for adapting a trained encoder), and generated "
        "queries because they need a generator model (and a GPU to be fast). Whether a recipe beats the base is "
        "measured, not assumed: the run's control and gate still decide what is published.")
    ict_keep_probability: float = Field(0.1, ge=0.0, le=1.0, description="Inverse cloze: how often the query's "
                                        "sentence stays in the document (Lee et al. 2019: 0.1), so the model also "
                                        "learns that a copied sentence is a match.")
    crop_min_ratio: float = Field(0.1, gt=0.0, le=1.0, description="Cropping: a span's length is at least this "
                                  "fraction of the passage's words (Contriever: 0.1).")
    crop_max_ratio: float = Field(0.5, gt=0.0, le=1.0, description="Cropping: and at most this fraction "
                                  "(Contriever: 0.5).")
    title_passages: Literal["first", "each"] = Field("first", description="Title: paired with the document's first "
                                                     "passage only, or with each of its passages.")
    pairs_per_passage: int = Field(1, ge=1, description="Inverse cloze and cropping: pairs made of each passage "
                                   "(inverse cloze: each with another sentence as the query, as far as there are).")
    seed: int = Field(0, description="Seeds every random choice, per document and builder: the pairs depend on the "
                      "documents and this seed only, not on their order or batching.")
    generator: str | None = Field(None, min_length=1, description="Generated queries: the seq2seq model writing "
                                  "them (a hub id such as doc2query/msmarco-t5-base-v1, a local folder or an "
                                  "offline: alias); needed iff builders has 'generated'.")
    queries_per_passage: int = Field(3, ge=1, description="Generated queries: sampled per passage (top-p 0.95); "
                                     "empty and repeated ones are dropped.")
    generator_max_new_tokens: int = Field(64, ge=1, description="Generated queries: at most this many tokens each.")
    cross_encoder: str | None = Field(None, min_length=1, description="Generated queries: a cross-encoder (hub id "
                                      "such as cross-encoder/ms-marco-MiniLM-L-6-v2, or a local folder) scoring "
                                      "each generated (query, passage) pair; the score is kept with the pair.")
    min_cross_encoder_score: float | None = Field(None, description="Generated queries: drop pairs the "
                                                  "cross-encoder scores below this (needs cross_encoder).")
    batch_size: int = Field(16, ge=1, description="Generated queries: passages per generation (and scoring) batch.")
    max_documents: int | None = Field(None, gt=0, description="Read only the first N usable documents (smoke runs).")

    @model_validator(mode="after")
    def _consistent(self) -> DocumentsConfig:
        if len(set(self.builders)) != len(self.builders):
            raise ValueError(f"builders {list(self.builders)} names a builder twice")
        if "generated" in self.builders and self.generator is None:
            raise ValueError("builders has 'generated' but no generator is set: set generator to a seq2seq model "
                             "(e.g. doc2query/msmarco-t5-base-v1 or a local folder), or drop 'generated'")
        if self.generator is not None and "generated" not in self.builders:
            raise ValueError(f"generator {self.generator!r} is set but builders {list(self.builders)} has no "
                             "'generated': add it, or unset generator")
        if self.cross_encoder is not None and "generated" not in self.builders:
            raise ValueError("cross_encoder scores generated queries only: add 'generated' to builders, or unset "
                             "cross_encoder")
        if self.min_cross_encoder_score is not None and self.cross_encoder is None:
            raise ValueError("min_cross_encoder_score needs a cross_encoder to score the pairs: set cross_encoder, "
                             "or unset min_cross_encoder_score")
        if self.crop_min_ratio > self.crop_max_ratio:
            raise ValueError(f"crop_min_ratio {self.crop_min_ratio} is above crop_max_ratio {self.crop_max_ratio}")
        if self.min_passage_words > self.passage_words:
            raise ValueError(f"min_passage_words {self.min_passage_words} is above passage_words "
                             f"{self.passage_words}: no passage could be kept")
        return self
