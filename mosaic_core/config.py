"""Typed, frozen configuration for every stage, loaded once at the edge and passed explicitly."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import Field, field_validator, model_validator

from mosaic_core.config_base import OFFLINE_MODEL, Frozen

__all__ = ["OFFLINE_MODEL"]  # re-exported; and every config defined here

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


class DistillConfig(Frozen):
    """Stage 1's distilled initialisation of the new rows (``mosaic_core.vocab.distill``)."""

    target: Literal["pooled", "tokens", "both"] = Field(
        "pooled", description="What the expanded model must reproduce: the pooled sentence embedding, the last "
        "hidden state at every position (new tokens: the mean over the pieces they replace), or both.")
    lr: float = Field(3e-3, gt=0.0, description="Adam learning rate of the new rows (no weight decay); "
                      "docs/benchmarks.md measures 1e-3 and 3e-3.")
    batch_size: int = Field(32, gt=0, description="Texts per distillation step.")
    max_length: int = Field(128, gt=0, description="Texts are cut after this many base tokens.")
    epochs: int = Field(1, ge=1, description="Passes over the training windows, at most max_steps steps.")
    max_steps: int | None = Field(
        1000, gt=0, description="Stop after this many steps (a budget independent of the corpus size: the rows "
        "need occurrences, not epochs).")
    eval_every: int = Field(25, gt=0, description="Steps between held-out evaluations.")
    patience: int = Field(4, ge=1, description="Stop after this many evaluations without a better held-out loss.")
    heldout_texts: int = Field(256, gt=0, description="Held-out windows that decide when to stop.")
    max_texts: int | None = Field(None, gt=0, description="Use at most this many training windows.")
    contexts: Literal["texts", "sentences"] = Field(
        "sentences", description="What the rows learn from: sentences drawn per new token, up to per_token of "
        "them each (as token distillation does), so a rare token is seen about as often as a frequent one; or the "
        "corpus texts as they come (a token gets as many updates as texts it is in). docs/benchmarks.md compares "
        "them.")
    per_token: int = Field(
        32, gt=0, description="contexts=sentences: sentences drawn for each new token (32: for the 1,375 tokens of "
        "the biomedical pairs that is 25.5k sentences, one pass within the default 1,000 steps).")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 autocast on CUDA and on CPUs with native bf16, else fp32.")
    seed: int = Field(0, description="Seed of the distillation's data order.")


class VocabConfig(Frozen):
    """Stage 1: the domain tokenizer, which of its tokens are added, and how their rows start."""

    base_model: str = Field(
        "thenlper/gte-base", description="Hub id, local path, or offline:all-MiniLM-L6-v2."
    )
    prompts: PromptsConfig | None = Field(
        None, description="The prompts stage 1's model declares for the stages after it "
        "(None: the ones the base model declares in its sentence-transformers config; "
        "'none': no prompt).")
    vocab_size: int | None = Field(
        None, gt=0, description="Domain tokenizer size; default: the base vocabulary's size."
    )
    min_frequency: int = Field(2, ge=1, description="Minimum corpus frequency of a domain-tokenizer token.")
    min_count: int = Field(
        50, ge=1, description="Add a candidate only if the expanded tokenizer uses it at least this often in the "
        "corpus (training must see a token to learn it); see docs/benchmarks.md for how 50 was chosen.")
    max_tokens: int | None = Field(
        None, gt=0, description="Add at most this many tokens: those saving the most base pieces.")
    init: Literal["mean", "distill"] = Field(
        "distill", description="New rows: the mean of their base pieces, or that mean refined by distillation.")
    distill: DistillConfig = Field(DistillConfig(), description="How the new rows are distilled (init: distill).")
    prune: float = Field(
        0.3, ge=0.0, lt=1.0, description="Once the rows are initialised, drop this share of the added tokens: those "
        "whose rows still move embeddings the most per base piece they save (measured on training sentences), then "
        "settle the selection again; kept tokens keep their rows (0: keep every token). docs/benchmarks.md has how "
        "0.3 was chosen: the largest share of the trade-off that keeps half the fertility gain.")
    prune_sentences: int = Field(
        8, gt=0, description="prune: training sentences per token on which its cost is measured.")
    heldout_every: int = Field(
        20, ge=2, description="Every n-th text is held out of training (fertility, drift, distillation's stop)."
    )
    text_columns: tuple[str, ...] = Field(
        ("query", "document"), min_length=1, description="Text columns of a pairs-file corpus."
    )
    model_kind: Literal["dense", "sparse"] = Field(
        "dense", description="sparse: write stage 1 as a SPLADE SparseEncoder (the new rows are also new output "
        "dimensions of the MLM head); the base should ship a masked-LM head.")
    reduce_to_corpus: str | None = Field(
        None, description="Before expanding, keep only the base vocabulary rows this corpus (a pairs file or "
        "data root) uses, plus specials and single characters (seed 004's language reduction).",
    )


class FilterConfig(Frozen):
    """Stage 0b: the consistency filter (or the threshold filter of the low-resource recipe)."""

    model: str = Field("thenlper/gte-base", description="Filter model: hub id, path or offline alias.")
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
        "score below its own (hard negatives for training).")
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


class StageConfig(Frozen):
    """One training stage (docs/method.md stages 2–3, plus seed 003's MLM warm-up).

    ``kind``: ``mlm`` — encoder frozen, only the MLM head transform and the domain rows of the
    embedding matrix train, on the domain-restricted MLM loss; ``joint`` — α·MLM + InfoNCE in
    one forward pass; ``contrastive`` — InfoNCE only.
    """

    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$", description="Label; also the output folder's name.")
    prompts: PromptsConfig | None = Field(
        None, description="The prompts this stage trains and validates with, and its model then declares "
        "(None: the ones its input model declares in its sentence-transformers config; "
        "'none': no prompt).")
    kind: Literal["mlm", "joint", "contrastive"] = Field(
        ..., description="mlm: MLM warm-up, encoder frozen; joint: alpha·MLM + InfoNCE; contrastive: InfoNCE only.")
    alpha: float = Field(0.3, ge=0.0, description="Weight of the MLM term in the joint loss.")
    mlm_probability: float = Field(0.15, gt=0.0, lt=1.0, description="Chance a candidate position is masked.")
    mlm_tokens: Literal["domain", "all"] = Field(
        "domain", description="Mask and predict domain tokens only (V_D) or every non-special token (ablation)."
    )
    scale: float = Field(50.0, gt=0.0, description="Fixed InfoNCE logit scale (1/temperature).")
    symmetric: bool = Field(False, description="Add the document→query InfoNCE direction.")
    lr: float = Field(1e-5, gt=0.0, description="Peak learning rate.")
    epochs: int = Field(1, ge=1, description="Passes over the training pairs (max_steps, when set, ends the stage "
                        "first).")
    max_steps: int | None = Field(None, gt=0, description="Stop after this many optimizer steps.")
    batch_size: int = Field(128, gt=0, description="Pairs per contrastive batch (in-batch negatives).")
    chunk_size: int | None = Field(
        None, gt=0, description="Gradient-caching chunk: pairs per forward pass (None: the whole batch)."
    )
    accumulation: int = Field(1, ge=1, description="Batches per optimizer step.")
    warmup_ratio: float = Field(0.06, ge=0.0, lt=1.0, description="Share of the steps over which the learning "
                                "rate rises linearly to lr.")
    schedule: Literal["linear", "cosine", "constant"] = Field(
        "linear", description="How the learning rate decays after the warmup.")
    weight_decay: float = Field(0.01, ge=0.0, description="AdamW weight decay (none on biases and LayerNorms).")
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradients are clipped to this norm.")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 autocast on CUDA and on CPUs with native bf16, else fp32."
    )
    query_max_length: int = Field(64, gt=0, description="Queries are cut after this many tokens.")
    document_max_length: int = Field(256, gt=0, description="Documents are cut after this many tokens.")
    seed: int = Field(0, description="Seed of the data order and the masks (both functions of seed and step).")
    checkpoint_every: int = Field(200, gt=0, description="Optimizer steps between checkpoints.")
    log_every: int = Field(10, gt=0, description="Steps between lines of train_log.jsonl (losses averaged over them).")
    eval_every: int | None = Field(None, gt=0, description="Steps between held-out evaluations (None: at the end).")
    mlm_target: float | None = Field(
        None, gt=0.0, lt=1.0, description="mlm warm-up only: stop once the MLM loss, averaged over the last "
        "log_every steps, is below this fraction of ln|V_D| (a uniform guess over the domain vocabulary); "
        "max_steps/epochs still cap the stage.")
    mlm_rows: bool = Field(
        True, description="mlm warm-up only: train the domain rows of the embedding matrix with the head (they "
        "are both the decoder's weights and the encoder's input); false trains the head's transform and bias "
        "alone, so every embedding the encoder reads stays as stage 1 left it.")
    hard_negatives: int = Field(
        0, ge=0, description="Hard-negative documents per pair added as extra InfoNCE columns (the consistency "
        "filter keeps each pair's; 0: in-batch negatives only).")
    keep_best: bool = Field(
        True, description="With validation pairs, the stage's output is its best validated model (NDCG@10, "
        "the input model included; ties: the later), not its last.")
    best_tolerance: float = Field(
        0.005, ge=0.0, description="keep_best: a later model within this much of the top validation NDCG@10 "
        "counts as a tie and wins (one query moving one rank among 64 changes NDCG@10 by up to 0.006).")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto: this rank's GPU when there is one (LOCAL_RANK under torchrun), else the CPU.")
    pairs: str | None = Field(
        None, description="This stage's own training pairs (a pairs file or a data root; seed 004's general "
        "retrieval data first, then the domain's). None: the run's pairs.")
    query_column: str | None = Field(None, description="Query column of this stage's pairs (None: the run's).")
    document_column: str | None = Field(None, description="Document column of this stage's pairs (None: the run's).")
    model_kind: Literal["dense", "sparse"] = Field(
        "dense", description="dense: pooled embeddings, cosine InfoNCE at `scale`; sparse: SPLADE (seed 003), the "
        "max-pooled log(1+ReLU) of the MLM head's logits, dot-product InfoNCE at scale 1 plus the FLOPS regulariser, "
        "saved as a sentence-transformers SparseEncoder.")
    flops_query: float = Field(5e-5, ge=0.0, description="sparse only: FLOPS regulariser weight on the queries "
                               "(sentence-transformers' SPLADE examples use 5e-5).")
    flops_document: float = Field(3e-5, ge=0.0, description="sparse only: FLOPS regulariser weight on the documents "
                                  "and hard negatives (sentence-transformers' SPLADE examples use 3e-5).")
    matryoshka_dims: tuple[int, ...] | None = Field(
        None, min_length=1, description="Matryoshka: the contrastive term is the weighted sum of InfoNCE over these "
        "prefixes of the pooled embedding, each renormalised (strictly descending, e.g. [384, 256, 128, 64]; at most "
        "the model's hidden size, checked when the stage starts), so the trained model can be cut to any of them. "
        "None: the full embedding only.")
    matryoshka_weights: tuple[float, ...] | None = Field(
        None, description="Matryoshka: the weight of each dimension's term, in the order of matryoshka_dims "
        "(default: 1 each, as sentence-transformers' MatryoshkaLoss).")

    @model_validator(mode="after")
    def _warmup_fields_need_warmup(self) -> StageConfig:
        if self.kind != "mlm":
            for field, default in (("mlm_target", None), ("mlm_rows", True)):
                if getattr(self, field) != default:
                    raise ValueError(f"stage {self.name!r}: {field} belongs to the mlm warm-up; a {self.kind} stage "
                                     f"has none (set it for the warm-up stage only, e.g. --set mlm.{field}=...)")
        return self

    @field_validator("matryoshka_dims", "matryoshka_weights", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        # `--set matryoshka_dims=384,256,128,64` (or [384, 256, ...]) arrives as one string.
        if isinstance(value, str):
            return tuple(v.strip() for v in value.strip("[]() ").split(",") if v.strip())
        return value

    @model_validator(mode="after")
    def _matryoshka(self) -> StageConfig:
        dims, weights = self.matryoshka_dims, self.matryoshka_weights
        if dims is None:
            if weights is not None:
                raise ValueError(f"stage {self.name!r}: matryoshka_weights without matryoshka_dims; give the "
                                 "dimensions too (e.g. matryoshka_dims=[384,256,128,64])")
            return self
        if self.kind == "mlm" or self.model_kind == "sparse":
            raise ValueError(f"stage {self.name!r}: matryoshka_dims truncate a dense pooled embedding in the "
                             f"contrastive term; a {self.model_kind} {self.kind} stage has none (remove them)")
        if any(d <= 0 for d in dims) or any(a <= b for a, b in zip(dims, dims[1:], strict=False)):
            raise ValueError(f"stage {self.name!r}: matryoshka_dims must be positive and strictly descending, e.g. "
                             f"[384, 256, 128, 64]; got {list(dims)}")
        if weights is not None and (len(weights) != len(dims) or any(w < 0 for w in weights) or not any(weights)):
            raise ValueError(f"stage {self.name!r}: matryoshka_weights needs one non-negative weight per dimension "
                             f"({len(dims)}: {list(dims)}), not all zero; got {list(weights)}")
        return self

    @property
    def uses_mlm(self) -> bool:
        return self.kind == "mlm" or (self.kind == "joint" and self.alpha > 0)


def _stages(*specs: tuple[str, str, dict]) -> tuple[StageConfig, ...]:
    return tuple(StageConfig(name=name, kind=kind, **kw) for name, kind, kw in specs)


PRESETS: dict[str, tuple[StageConfig, ...]] = {
    # The paper: joint domain-restricted MLM + contrastive, then contrastive only.
    "paper": _stages(("joint", "joint", {}), ("contrastive", "contrastive", {})),
    # Seed 003's domain warm-up first (needed when the base ships no MLM head): until the MLM loss
    # is below 0.85·ln|V_D| (knowing the domain tokens' frequencies alone gives 0.84–0.85 on the biomed
    # abstracts: docs/benchmarks.md), at most 10 epochs; a constant rate, the stop step being unknown.
    "warmup": _stages(("mlm", "mlm", {"lr": 5e-4, "schedule": "constant", "mlm_target": 0.85, "epochs": 10}),
                      ("joint", "joint", {}), ("contrastive", "contrastive", {})),
    # Ablations (paper Table 4/5).
    **{f"alpha-{a}": _stages(("joint", "joint", {"alpha": a}), ("contrastive", "contrastive", {}))
       for a in (0.1, 0.2, 0.3, 0.4, 0.5)},
    "all-token": _stages(("joint", "joint", {"mlm_tokens": "all", "alpha": 0.1}), ("contrastive", "contrastive", {})),
    "mask-0.3": _stages(("joint", "joint", {"mlm_probability": 0.3}), ("contrastive", "contrastive", {})),
    "reversed": _stages(("contrastive", "contrastive", {}), ("joint", "joint", {})),
    "contrastive-only": _stages(("contrastive", "contrastive", {}),),
    # Seed 004: general retrieval pairs first (set general.pairs), then the domain's joint and contrastive stages.
    "multistage": _stages(("general", "contrastive", {"hard_negatives": 1}), ("joint", "joint", {}),
                          ("contrastive", "contrastive", {})),
}


class TrainConfig(Frozen):
    """A training run: stages in order, each starting from the previous stage's model."""

    stages: tuple[StageConfig, ...] = Field(
        PRESETS["paper"], min_length=1, description="The training stages in order (default: the paper preset, "
        "joint then contrastive).")
    heldout_pairs: int = Field(
        256, ge=0, description="Test pairs kept out of training: the evaluation's held-out task and the publish gate.")
    validation_pairs: int = Field(
        256, ge=0, description="Further pairs kept out of training, scored every eval_every steps (and at the end "
        "of each stage) to keep each stage's best model.")
    validation_pool: int = Field(
        1000, ge=0, description="Training documents added as distractors to the validation retrieval.")
    merge_weights: tuple[float, ...] = Field(
        (), description="WiSE-FT: after the last stage, interpolate its weights with the input (stage-1) model's "
        "at each of these weights (0 < w < 1; 1.0, the last stage itself, always competes) and keep the best "
        "on the validation pairs. Empty: no merge step.")
    query_column: str = Field("query", description="Column of a pairs file that holds the queries.")
    document_column: str = Field("document", description="Column of a pairs file that holds the documents.")

    @model_validator(mode="after")
    def _unique_names(self) -> TrainConfig:
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique (they name output folders): {names}")
        if any(not 0 < w <= 1 for w in self.merge_weights):
            raise ValueError(f"merge_weights must lie in (0, 1]: {self.merge_weights}")
        if self.merge_weights and not self.validation_pairs:
            raise ValueError("the merge step chooses its weight on validation pairs: set validation_pairs > 0")
        return self

    def columns_for(self, stage: StageConfig) -> tuple[str, str]:
        """(query column, document column) of ``stage``'s pairs."""
        return stage.query_column or self.query_column, stage.document_column or self.document_column

    def control(self) -> TrainConfig:
        """The plain fine-tuning control of this run: one contrastive stage from the base, on the
        same pairs, hard negatives, prompts and lengths as the last stage, for the steps (or the
        epochs) of every stage together; no MLM, no vocabulary, no merge."""
        last = self.stages[-1]
        steps = [s.max_steps for s in self.stages]
        budget = ({"max_steps": sum(steps)} if all(steps) else
                  {"max_steps": None, "epochs": sum(s.epochs for s in self.stages)})
        drop = {"kind", "name", "alpha", "mlm_probability", "mlm_tokens", "mlm_target", "mlm_rows"}
        stage = StageConfig.model_validate({**last.model_dump(exclude=drop), "name": "control",
                                            "kind": "contrastive", **budget})
        return self.model_copy(update={"stages": (stage,), "merge_weights": ()})

    @classmethod
    def preset(cls, name: str, overrides: dict | None = None, per_stage: dict[str, dict] | None = None,
               **kwargs) -> TrainConfig:
        """A preset's stages with ``overrides`` (field → value) applied to every stage and
        ``per_stage`` (stage name → {field → value}) to the stages named; validated."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
        unknown = set(per_stage or {}) - {s.name for s in PRESETS[name]}
        if unknown:
            raise ValueError(f"no stage {sorted(unknown)} in preset {name!r} "
                             f"({', '.join(s.name for s in PRESETS[name])})")
        stages = tuple(StageConfig.model_validate({**s.model_dump(), **(overrides or {}),
                                                   **(per_stage or {}).get(s.name, {})}) for s in PRESETS[name])
        return cls(stages=stages, **kwargs)


class EvalTaskSpec(Frozen):
    """One evaluation task: an mteb task by name, or local files wrapped as an mteb task."""

    kind: Literal["mteb", "beir", "sts", "heldout", "verses"] = Field(
        ..., description="mteb: a task by name; beir: a BEIR folder; sts: an STS file; heldout: a run's held-out "
        "pairs; verses: the Islamic held-out verse links.")
    name: str = Field(..., min_length=1, description="mteb task name, or the label of a local task.")
    description: str | None = Field(
        None, description="What the task asks, in words a newcomer understands (the run report leads with it).")
    path: str | None = Field(None, description="BEIR folder, STS file, or pairs source (heldout, verses).")
    collection: str | None = Field(
        None, description="verses: the Qur'an translation ('sura|aya|text' lines) whose verses are the corpus."
    )
    split: str | None = Field(None, description="BEIR qrels split (default: test, or the only one).")
    pool: int = Field(10_000, gt=0, description="heldout: distractor documents from the training pairs.")
    heldout_pairs: int = Field(256, gt=0, description="heldout: pairs held out (must match training).")
    query_column: str = Field("query", description="heldout: column of a pairs file that holds the queries.")
    document_column: str = Field("document", description="heldout: column of a pairs file that holds the "
                                 "documents.")

    @model_validator(mode="after")
    def _path_for_local(self) -> EvalTaskSpec:
        if self.kind != "mteb" and not self.path:
            raise ValueError(f"a {self.kind} task needs a path")
        if self.kind == "verses" and not self.collection:
            raise ValueError("a verses task needs a collection (the 'sura|aya|text' translation file)")
        return self


class EvalConfig(Frozen):
    tasks: tuple[EvalTaskSpec, ...] = Field(..., min_length=1)
    batch_size: int = Field(64, gt=0)
    model_kind: Literal["auto", "dense", "sparse"] = Field(
        "auto", description="auto: a SparseEncoder directory is scored as SPLADE, anything else as dense; sparse: "
        "score every model as SPLADE on its masked-LM head (e.g. a plain BERT checkpoint).")
    skip_unavailable: bool = Field(False, description="Report unavailable tasks and go on instead of failing.")
    dims: tuple[int, ...] | None = Field(
        None, min_length=1, description="Score each task with the embeddings cut to each of these dimensions and "
        "renormalised (Matryoshka; e.g. [384, 128, 64]); every score is then named TASK@DIM. None: whole embeddings.")
    prompts: PromptsConfig | None = Field(
        None, description="Query and document prompts for every model scored (None: each model's own, as its "
        "sentence-transformers config declares them; 'none': no prompt).")


    @model_validator(mode="after")
    def _dims_distinct(self) -> EvalConfig:
        if self.dims is not None and (any(d <= 0 for d in self.dims) or len(set(self.dims)) != len(self.dims)):
            raise ValueError(f"dims must be distinct positive dimensions, e.g. 384,128,64; got {list(self.dims)}")
        return self


class TrackingConfig(Frozen):
    """Where a run is tracked besides its own files (docs/tracking.md). TensorBoard needs no
    setting: every stage writes event files to ``<its folder>/tb`` when the ``tracking`` extra
    is installed. MLflow is opt-in: one run per pipeline run, a nested run per stage."""

    mlflow_uri: str | None = Field(
        None, description="MLflow tracking URI: a server (http://127.0.0.1:5000) or a local store (file:./mlruns, "
        "relative to the directory mosaic runs in); unset: no MLflow.")
    experiment: str = Field("mosaic", min_length=1,
                            description="The MLflow experiment the runs go into (created when missing).")


class GateConfig(Frozen):
    """The publish gate of a pipeline run (``mosaic_core.evaluate.gate``)."""

    publish: bool = Field(True, description="Publish the final model (DATA_ROOT/models/current) when it passes.")
    tolerance: float = Field(
        0.0, ge=0.0, description="Points (main score × 100) the final model may fall below the base or the "
        "published model on a gate task and still pass.")
    tasks: tuple[str, ...] | None = Field(
        None, description="Gate tasks by name; default: the held-out pairs and every task in eval_tasks.")
    beat_control: bool = Field(
        False, description="Also refuse a final model below the run's plain fine-tuning control (needs control: "
        "contrastive) on a gate task, by more than the tolerance.")


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


class PipelineConfig(Frozen):
    """The whole pipeline: ingest → filter → vocab → train stages → evaluation. Validated fully
    (every section, every cross-field rule) before any work starts."""

    base_model: str = Field("thenlper/gte-base", description="Model to adapt (stage 1 expands it).")
    model_kind: Literal["dense", "sparse"] = Field(
        "dense", description="dense or sparse (SPLADE) for stage 1 and every training stage (fills vocab.model_kind "
        "and each stage's model_kind).")
    domain: str = Field("biomedicine", min_length=1, description="The domain, as the model cards name it.")
    prompts: PromptsConfig | None = Field(
        None, description="Query and document prompts of the model being adapted, used wherever it encodes (fills "
        "vocab.prompts, each stage's prompts, and filter.prompts when the filter model is the base). None: the ones "
        "the base model declares in its sentence-transformers config; 'none': no prompt.")
    ingest: IngestConfig = Field(IngestConfig(), description="Where the PubMed snapshot comes from and how it "
                                 "becomes pairs.")
    islamic: IslamicConfig | None = Field(
        None, description="Build the pairs from the Qur'an and Tafsir instead of ingesting PubMed (ingest unused; "
        "filter.model scores the pairs).")
    pairs: OwnPairsConfig | None = Field(
        None, description="Your own domain's (query, document) pairs instead of PubMed (ingest unused).")
    filter: FilterConfig = Field(FilterConfig(), description="The consistency (or threshold) filter of the pairs.")
    vocab: VocabConfig = Field(VocabConfig(), description="Stage 1: the domain vocabulary.")
    train: TrainConfig = Field(TrainConfig(), description="The training stages.")
    eval_tasks: tuple[EvalTaskSpec, ...] = Field(
        (), description="Extra evaluation tasks; the held-out retrieval task of the run is always added."
    )
    eval_pool: int = Field(10_000, gt=0, description="Distractor documents of the held-out task.")
    gate: GateConfig = Field(GateConfig(), description="The publish gate.")
    control: Literal["contrastive"] | None = Field(
        None, description="contrastive: also train the control a user would otherwise run — plain contrastive "
        "fine-tuning of the base on the same pairs, hard negatives and number of steps, with no domain vocabulary "
        "and no MLM — and show the final model against it (report, card, history); see gate.beat_control.")
    export: tuple[Literal["onnx", "onnx-int8", "openvino", "static"], ...] = Field(
        (), description="Fast exports of the published model, written after publish beside models/current "
        "(models/exports/<kind>/, never replacing it), each verified against the PyTorch model (`mosaic export`; "
        "needs pip install -e '.[export]').")
    tracking: TrackingConfig = Field(TrackingConfig(), description="MLflow tracking (TensorBoard is always on).")
    workers: int = Field(1, ge=1, description="Dask worker processes for the ingest and filter maps (1: threads).")
    dask_address: str | None = Field(
        None, description="Run the ingest and filter maps on this Dask cluster (e.g. tcp://scheduler:8786)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> PipelineConfig:
        if self.islamic is not None and self.pairs is not None:
            raise ValueError("islamic and pairs are two sources: give one (or neither, for PubMed)")
        if self.gate.beat_control and self.control is None:
            raise ValueError("gate.beat_control compares with the control run: set control: contrastive")
        kinds = {self.vocab.model_kind, *(s.model_kind for s in self.train.stages)}
        if kinds != {self.model_kind}:
            raise ValueError(f"model_kind {self.model_kind!r}, but stage 1 or a stage says otherwise "
                             f"({sorted(kinds)}); set model_kind only")
        if self.vocab.base_model != self.base_model:
            raise ValueError(f"vocab.base_model ({self.vocab.base_model}) must equal base_model ({self.base_model}); "
                             "set base_model only")
        unknown = set(self.gate.tasks or ()) - set(self.evaluated_tasks())
        if unknown:
            raise ValueError(f"gate.tasks {sorted(unknown)} are not evaluated: choose among {self.evaluated_tasks()}")
        return self

    def evaluated_tasks(self) -> list[str]:
        """Every task a pipeline run scores: its held-out pairs (and verses, for the Islamic
        source), then ``eval_tasks``."""
        return [t.name for t in self.eval_specs(".")]

    def eval_specs(self, data_root: str) -> tuple[EvalTaskSpec, ...]:
        """The tasks of :meth:`evaluated_tasks` for a run whose pairs live in ``data_root``."""
        pairs = {"path": data_root, "heldout_pairs": self.train.heldout_pairs, "query_column": self.train.query_column,
                 "document_column": self.train.document_column}
        heldout = EvalTaskSpec(kind="heldout", name="heldout", pool=self.eval_pool, **pairs, description=(
            "finding a held-out verse's Tafsir-linked verse among the verses of the pairs" if self.islamic else
            "finding a held-out pair's document from its query, among other documents" if self.pairs else
            "finding a held-out article's abstract from its title, among other abstracts"))
        verses = () if self.islamic is None else (EvalTaskSpec(
            kind="verses", name="verses", collection=self.islamic.quran, **pairs,
            description="finding the verses a held-out verse's Tafsir commentary cites, among every verse of the "
            "Qur'an"),)
        return (heldout, *verses, *self.eval_tasks)

    def gate_tasks(self) -> list[str]:
        """The tasks the publish gate compares models on."""
        return list(self.gate.tasks) if self.gate.tasks is not None else self.evaluated_tasks()

    @classmethod
    def load(cls, data: dict) -> PipelineConfig:
        """From a parsed YAML mapping: ``base_model`` also fills ``vocab.base_model`` and, unless given,
        ``filter.model`` stays its own (the paper filters with gte-base whatever the base is);
        ``prompts`` fills stage 1's, each stage's and (when it filters with the base) the filter's,
        where they give none of their own."""
        data = dict(data)
        if data.get("prompts") is not None:
            prompts = PromptsConfig.model_validate(data["prompts"]).model_dump()
            train = dict(data.get("train", {}))
            stages = train.get("stages", [s.model_dump() for s in TrainConfig().stages])
            own = lambda section: section if section.get("prompts") is not None else {**section, "prompts": prompts}  # noqa: E731
            train["stages"] = [own(s) for s in stages]
            data["train"] = train
            data["vocab"] = own(data.get("vocab", {}))
            filter_model = data.get("filter", {}).get("model", FilterConfig().model)
            if filter_model == data.get("base_model", cls.model_fields["base_model"].default):
                data["filter"] = own(data.get("filter", {}))
        if "base_model" in data:
            data["vocab"] = {**data.get("vocab", {}), "base_model": data["base_model"]}
        if "model_kind" in data:
            kind = data["model_kind"]
            train = dict(data.get("train", {}))
            stages = train.get("stages", [s.model_dump() for s in TrainConfig().stages])
            train["stages"] = [{**s, "model_kind": kind} for s in stages]
            data["vocab"] = {**data.get("vocab", {}), "model_kind": kind}
            data["train"] = train
        return cls.model_validate(data)
