"""Typed, frozen configuration of stage 1 and the training stages, with the stage presets
(re-exported by :mod:`mosaic_core.config`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from mosaic_core.config_base import DEFAULT_BASE, Frozen
from mosaic_core.config_data import NegativeRule, PromptsConfig


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
        DEFAULT_BASE, description="Hub id, local path, or offline:all-MiniLM-L6-v2."
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
    sample_texts: int = Field(
        100_000, gt=0, description="Stage 1 reads at most this many texts of the corpus: those with the smallest "
        "content hash, in corpus order (the whole corpus when it has fewer). Its time and memory then stop growing "
        "with the corpus; docs/benchmarks.md measures what the sample size changes.")
    heldout_every: int = Field(
        20, ge=2, description="Every n-th text of the sample is held out of training (fertility, drift, "
        "distillation's stop)."
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
    epochs: int = Field(1, ge=1, description="Passes over the training pairs; ignored when max_steps is set (the "
                        "stage then runs max_steps steps, starting another pass over the pairs as needed).")
    max_steps: int | None = Field(None, gt=0, description="Stop after this many optimizer steps.")
    batch_size: int = Field(128, gt=0, description="Pairs per contrastive batch (in-batch negatives).")
    chunk_size: int | None = Field(
        None, gt=0, description="Gradient-caching chunk: pairs per forward pass (None: the whole batch when its "
        "estimated activations fit activation_gib, else the most pairs that do)."
    )
    activation_gib: float | None = Field(
        None, gt=0.0, description="GiB of activations one forward pass may keep before the batch is chunked "
        "(None: 0.75 on a CPU, 80 % of the free memory on a GPU). The loss is the same either way.")
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
    pad_to_multiple_of: int | None = Field(
        None, gt=0, description="Pad each batch's token length up to a multiple of this (padded positions are "
        "masked: the loss is the same). None: 8 on a GPU (tensor-core shapes, and fewer distinct shapes for a "
        "compiled encoder), 1 on a CPU.")
    collate_threads: int | None = Field(
        None, gt=0, description="Threads that read and tokenize batches ahead of the step (the batches are the same "
        "whatever their number). None: 4 on a GPU, 1 on a CPU (where the step needs the cores).")
    compile: bool = Field(
        False, description="torch.compile the encoder (dynamic shapes; the saved weights are the same). The first "
        "steps pay the compile time, so it is worth it on a GPU over a long stage; measure with "
        "bench/train_step.py --compile.")
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
    objective: Literal["infonce", "margin_mse"] = Field(
        "infonce", description="The retrieval term: infonce, the contrastive loss over in-batch and hard negatives; "
        "or margin_mse (GPL's MarginMSE): the student's margin between each pair's positive and each of its hard "
        "negatives, scale × the cosine difference, is regressed onto the teacher cross-encoder's margin (needs "
        "teacher and hard_negatives; dense, no Matryoshka).")
    teacher: str | None = Field(
        None, min_length=1, description="margin_mse only: the cross-encoder that scores each (query, positive) "
        "and (query, hard negative) pair before the stage trains (a hub id such as "
        "cross-encoder/ms-marco-MiniLM-L-6-v2, or a local folder); its scores are kept with the examples.")
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

    @model_validator(mode="after")
    def _margin_mse(self) -> StageConfig:
        if self.objective != "margin_mse":
            if self.teacher is not None:
                raise ValueError(f"stage {self.name!r}: teacher {self.teacher!r} labels margins for "
                                 "objective margin_mse; set objective=margin_mse or unset teacher")
            return self
        refusals = [(self.kind == "mlm", "the mlm warm-up trains no retrieval term"),
                    (self.teacher is None, "it needs a teacher cross-encoder (e.g. "
                     "teacher=cross-encoder/ms-marco-MiniLM-L-6-v2, or a local folder)"),
                    (self.hard_negatives < 1, "its margins are between a positive and hard negatives: set "
                     "hard_negatives >= 1"),
                    (self.model_kind == "sparse", "it scores dense embeddings by cosine; a sparse stage trains "
                     "with infonce"),
                    (self.matryoshka_dims is not None, "it scores whole embeddings; Matryoshka prefixes train "
                     "with infonce"),
                    (self.symmetric, "it has no document→query direction; unset symmetric")]
        why = [reason for refused, reason in refusals if refused]
        if why:
            raise ValueError(f"stage {self.name!r}: objective margin_mse: {'; '.join(why)}")
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


# The budget of every domain stage of the presets, from the budget curve (bench/budget_curve.py;
# docs/benchmarks.md, "The budget curve"): 80 optimizer steps of 32 pairs, one hard negative each,
# at the default lr 1e-5, validated every 20 steps to keep the best model (the input model
# included), as the curve trained them. On the real biomedical pairs it is the smallest budget of
# the paper preset that no other (40, 160 or 292 steps per stage) beats on SciFact or the held-out
# pairs, at 0.72 CPU h on a 2-core VM; one pass per stage (292 steps) is beaten on SciFact. The
# steps are the budget whatever the corpus size (several passes on fewer than 2,560 pairs); an
# explicit `epochs` without `max_steps` trains whole passes instead (TrainConfig.preset).
STAGE_BUDGET: dict = {"batch_size": 32, "max_steps": 80, "hard_negatives": 1, "eval_every": 20,
                      "checkpoint_every": 40}


def _domain(name: str, kind: str, kw: dict | None = None) -> tuple[str, str, dict]:
    """A preset's stage on the domain's pairs: the curve's budget, then the stage's own fields."""
    return name, kind, {**STAGE_BUDGET, **(kw or {})}


PRESETS: dict[str, tuple[StageConfig, ...]] = {
    # The paper: joint domain-restricted MLM + contrastive, then contrastive only.
    "paper": _stages(_domain("joint", "joint"), _domain("contrastive", "contrastive")),
    # Seed 003's domain warm-up first (needed when the base ships no MLM head): until the MLM loss
    # is below 0.85·ln|V_D| (knowing the domain tokens' frequencies alone gives 0.84–0.85 on the biomed
    # abstracts: docs/benchmarks.md), at most 10 epochs; a constant rate, the stop step being unknown.
    "warmup": _stages(("mlm", "mlm", {"lr": 5e-4, "schedule": "constant", "mlm_target": 0.85, "epochs": 10}),
                      _domain("joint", "joint"), _domain("contrastive", "contrastive")),
    # Ablations (paper Table 4/5).
    **{f"alpha-{a}": _stages(_domain("joint", "joint", {"alpha": a}), _domain("contrastive", "contrastive"))
       for a in (0.1, 0.2, 0.3, 0.4, 0.5)},
    "all-token": _stages(_domain("joint", "joint", {"mlm_tokens": "all", "alpha": 0.1}),
                         _domain("contrastive", "contrastive")),
    "mask-0.3": _stages(_domain("joint", "joint", {"mlm_probability": 0.3}), _domain("contrastive", "contrastive")),
    "reversed": _stages(_domain("contrastive", "contrastive"), _domain("joint", "joint")),
    # The paper preset's steps in one stage: plain fine-tuning at equal compute (what `control` trains).
    "contrastive-only": _stages(_domain("contrastive", "contrastive",
                                        {"max_steps": 2 * STAGE_BUDGET["max_steps"]}),),
    # Seed 004: general retrieval pairs first (set general.pairs), then the domain's joint and contrastive stages.
    "multistage": _stages(("general", "contrastive", {"hard_negatives": 1}), _domain("joint", "joint"),
                          _domain("contrastive", "contrastive")),
}


class TrainConfig(Frozen):
    """A training run: stages in order, each starting from the previous stage's model."""

    stages: tuple[StageConfig, ...] = Field(
        PRESETS["paper"], description="The training stages in order, at least one (default: the paper preset, "
        "joint then contrastive, each 80 steps of 32 pairs with one hard negative: the budget curve's "
        "recommendation, docs/benchmarks.md).")
    heldout_pairs: int = Field(
        256, ge=0, description="Test pairs kept out of training: the evaluation's held-out task and the publish gate; "
        "the lowest content hashes, at most a fifth of the pairs. This many at a data root's first run: later runs "
        "keep them and add the new pairs whose hash falls below the last one's, so the test set grows with the corpus "
        "(DATA_ROOT/state/heldout.json; a pairs file is split afresh).")
    validation_pairs: int = Field(
        256, ge=0, description="Further pairs kept out of training, scored every eval_every steps (and at the end "
        "of each stage) to keep each stage's best model: the next content hashes after the test pairs, at most a "
        "fifth of the rest, kept and grown with the corpus as the test pairs are.")
    validation_pool: int = Field(
        1000, ge=0, description="Training documents added as distractors to the validation retrieval.")
    merge_weights: tuple[float, ...] = Field(
        (), description="WiSE-FT: after the last stage, interpolate its weights with the input (stage-1) model's "
        "at each of these weights (0 < w < 1; 1.0, the last stage itself, always competes) and keep the best "
        "on the validation pairs. Empty: no merge step.")
    query_column: str = Field("query", description="Column of a pairs file that holds the queries.")
    document_column: str = Field("document", description="Column of a pairs file that holds the documents.")
    negative_rule: NegativeRule = Field(NegativeRule(), description="Which documents may be hard negatives when "
                                        "they are mined for a pairs source without them.")
    mlm_warmup: Literal["auto", "off"] = Field(
        "auto", description="auto: when the input model ships no MLM head and the first stage trains the MLM term "
        "(a joint stage), an MLM warm-up stage goes first and trains the head alone (encoder and embedding rows "
        "frozen; at most mlm_warmup_steps, stopping once the MLM loss is below 0.85·ln|V_D|), so that the "
        "joint stage's MLM term starts from a trained head. off: the stages as given.")
    mlm_warmup_steps: int | None = Field(
        None, gt=0, description="The automatic warm-up's step cap (it stops earlier once below its target). None: "
        "the first stage's budget (its max_steps, else its epochs). The warm-up trains the head alone, so its "
        "steps cost a fraction of a joint step's.")
    dictionary: StageConfig | None = Field(
        None, description="The dictionary stage a glossary adds (set by the pipeline from glossary.dictionary): an "
        "mlm stage on its own texts (its pairs: dictionary texts as documents), trained after any warm-up and "
        "before the other stages, with no test or validation pairs held out of its texts.")
    extra_pairs: str | None = Field(
        None, description="A pairs file (query, document columns) added to the training pairs of every stage that "
        "trains on the run's pairs (set by the pipeline: the glossary's definition pairs); never held out, never "
        "a hard negative.")

    @field_validator("stages")
    @classmethod
    def _some_stages(cls, stages: tuple[StageConfig, ...]) -> tuple[StageConfig, ...]:
        # checked after the stages validate (a Field min_length would also count a stage that failed,
        # and add a second, spurious error to the real one)
        if not stages:
            raise ValueError("at least one stage")
        return stages

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

    @property
    def may_warm_up(self) -> bool:
        """Whether :meth:`with_warmup` adds a warm-up to an input model without an MLM head: with
        ``mlm_warmup`` auto, when the first stage is a joint one that trains the MLM term."""
        first = self.stages[0]
        return self.mlm_warmup == "auto" and first.kind == "joint" and first.uses_mlm

    def with_warmup(self, input_has_head: bool) -> TrainConfig:
        """The stages trained from an input model with (``input_has_head``) or without an MLM head:
        with ``mlm_warmup`` auto, a head-only MLM warm-up before a first stage that trains the MLM
        term from an input without a head (MiniLM, most sentence-transformers models); else these."""
        first = self.stages[0]
        if input_has_head or not self.may_warm_up:
            return self
        keep = {"prompts", "batch_size", "chunk_size", "activation_gib", "accumulation", "precision", "seed",
                "mlm_probability", "mlm_tokens", "query_max_length", "document_max_length", "checkpoint_every",
                "log_every", "pairs", "query_column", "document_column", "model_kind", "epochs", "max_steps"}
        name = next(n for n in ("mlm", "mlm-warmup", "warmup") if n not in {s.name for s in self.stages})
        warmup = StageConfig.model_validate({
            **first.model_dump(include=keep), "name": name, "kind": "mlm", "lr": 5e-4, "schedule": "constant",
            "mlm_target": 0.85, "mlm_rows": False, "eval_every": None,
            **({"max_steps": self.mlm_warmup_steps} if self.mlm_warmup_steps else {})})
        return self.model_copy(update={"stages": (warmup, *self.stages)})

    def with_dictionary(self) -> TrainConfig:
        """The stages with the dictionary stage (if any) after the leading warm-up stages and before
        the others."""
        if self.dictionary is None:
            return self
        lead = next((i for i, s in enumerate(self.stages) if s.kind != "mlm"), len(self.stages))
        return self.model_copy(update={"stages": (*self.stages[:lead], self.dictionary, *self.stages[lead:])})

    def data_for(self, stage: StageConfig) -> TrainConfig:
        """The config ``stage`` reads its data by: the dictionary stage holds no pairs out of its
        texts and adds no extra pairs; any other stage, this one."""
        if stage != self.dictionary:
            return self
        return self.model_copy(update={"heldout_pairs": 0, "validation_pairs": 0, "extra_pairs": None})

    def columns_for(self, stage: StageConfig) -> tuple[str, str]:
        """(query column, document column) of ``stage``'s pairs."""
        return stage.query_column or self.query_column, stage.document_column or self.document_column

    def control(self) -> TrainConfig:
        """The plain fine-tuning control of this run: one contrastive stage from the base, on the
        same pairs, hard negatives, prompts and lengths as the last stage, for the steps of every
        stage that trains the encoder together (an MLM warm-up, whose encoder is frozen, adds none),
        or their passes when one of them has no step cap; no MLM, no vocabulary, no merge, no
        dictionary stage; the extra pairs (a glossary's definition pairs) as the adapted stages have them."""
        last = self.stages[-1]
        training = [s for s in self.stages if s.kind != "mlm"] or list(self.stages)
        steps = [s.max_steps for s in training]
        budget = ({"max_steps": sum(steps)} if all(steps) else
                  {"max_steps": None, "epochs": sum(s.epochs for s in training)})
        drop = {"kind", "name", "alpha", "mlm_probability", "mlm_tokens", "mlm_target", "mlm_rows"}
        stage = StageConfig.model_validate({**last.model_dump(exclude=drop), "name": "control",
                                            "kind": "contrastive", **budget})
        return self.model_copy(update={"stages": (stage,), "merge_weights": (), "dictionary": None})

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
        stages = []
        for stage in PRESETS[name]:
            given = {**(overrides or {}), **(per_stage or {}).get(stage.name, {})}
            fields = {**stage.model_dump(), **given}
            if "epochs" in given and "max_steps" not in given:
                fields["max_steps"] = None  # passes asked for: the preset's step cap would cut them short
            stages.append(StageConfig.model_validate(fields))
        return cls(stages=tuple(stages), **kwargs)
