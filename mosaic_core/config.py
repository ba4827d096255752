"""Typed, frozen configuration for every stage, loaded once at the edge and passed explicitly:
the evaluation, the gate, tracking and the whole pipeline here, the data steps in
:mod:`mosaic_core.config_data`, stage 1 and training in :mod:`mosaic_core.config_train`
(every config is importable from here), the evaluation task kinds in :mod:`mosaic_core.eval_tasks`
(their union, ``EvalTaskSpec``, importable from here)."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Literal

from pydantic import Field, SerializeAsAny, field_validator, model_validator

from mosaic_core.config_base import DEFAULT_BASE, OFFLINE_MODEL, Frozen, with_sets
from mosaic_core.config_data import (NCBI_PUBMED_URL, DictionaryConfig, FilterConfig, GlossaryConfig, IngestConfig,
                                     IslamicConfig, OwnPairsConfig, PairConfig, PromptsConfig)
from mosaic_core.config_documents import DocumentsConfig
from mosaic_core.config_sources import (DemoSource, DocumentsSource, IslamicSource, OwnPairsSource, PubMedSource,
                                        Source, translate)
from mosaic_core.config_train import PRESETS, DistillConfig, StageConfig, TrainConfig, VocabConfig
from mosaic_core.eval_tasks import EvalTask, EvalTaskSpec, HeldoutTask

__all__ = ["DEFAULT_BASE", "DemoSource", "DictionaryConfig", "DistillConfig", "DocumentsConfig", "DocumentsSource",
           "EvalConfig", "EvalTask", "EvalTaskSpec", "FilterConfig", "Frozen", "GateConfig", "GlossaryConfig",
           "IngestConfig", "IslamicConfig", "IslamicSource", "NCBI_PUBMED_URL", "OFFLINE_MODEL", "OwnPairsConfig",
           "OwnPairsSource", "PRESETS", "PairConfig", "PipelineConfig", "PromptsConfig", "PubMedSource", "Source",
           "StageConfig", "TrackingConfig", "TrainConfig", "UpdateConfig", "VocabConfig"]


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


class UpdateConfig(Frozen):
    """Update ticks (docs/concepts/continual.md): a run on a data root whose last run left live
    models, with the same configuration and new pairs, trains only what the new pairs hold."""

    enabled: bool = Field(True, description="Rerun on new pairs as an update tick when the live models and the "
                          "configuration allow it; false: every run is a full rebuild (as `mosaic run --full`).")
    replay: float = Field(
        1.0, ge=0.0, description="Earlier training pairs replayed per new pair (a seeded sample), so the tick "
        "does not forget what the live model learnt.")
    epochs: float | None = Field(
        None, gt=0.0, description="Passes over the tick's pairs (new plus replayed) per training stage: a stage "
        "trains ceil(epochs × pairs / batch_size) steps, at most its own max_steps. None: each stage makes the "
        "passes the last full rebuild's stage made over its pairs (its steps × batch / pairs), so a tick trains "
        "every pair at the rate a full rebuild does (1.0 when no record says).")
    full_every: int = Field(10, ge=1, description="A full rebuild after this many update ticks in a row.")
    max_new_share: float = Field(
        0.25, gt=0.0, le=1.0, description="A full rebuild when the new pairs are more than this share of the "
        "training pairs (a new baseline, not an update).")
    split_drift: float = Field(
        0.05, gt=0.0, description="A full rebuild when the share of the new pairs' words that the live tokenizer "
        "splits into three or more pieces exceeds the earlier pairs' share by more than this.")
    score_drift: float = Field(
        0.05, gt=0.0, description="The next run is a full rebuild when the published model scored the held-out "
        "pairs added since the last full rebuild this much lower (NDCG@10) than the earlier held-out pairs, beyond "
        "noise (the 95 % bootstrap interval of the drop above 0; measured from 10 such pairs on).")
    seed: int = Field(0, description="Seed of the replay sample (mixed with the tick's number).")


class PipelineConfig(Frozen):
    """The whole pipeline: ingest → filter → vocab → train stages → evaluation. Validated fully
    (every section, every cross-field rule) before any work starts."""

    base_model: str = Field(DEFAULT_BASE, description="Model to adapt (stage 1 expands it).")
    model_kind: Literal["dense", "sparse"] = Field(
        "dense", description="dense or sparse (SPLADE) for stage 1 and every training stage (fills vocab.model_kind "
        "and each stage's model_kind).")
    domain: str = Field("biomedicine", min_length=1, description="The domain, as the model cards name it.")
    prompts: PromptsConfig | None = Field(
        None, description="Query and document prompts of the model being adapted, used wherever it encodes (fills "
        "vocab.prompts, each stage's prompts, and filter.prompts when the filter model is the base). None: the ones "
        "the base model declares in its sentence-transformers config; 'none': no prompt.")
    source: SerializeAsAny[Source] = Field(
        PubMedSource(), description="Where the pairs come from, by kind: pubmed (a snapshot; the default), pairs "
        "(your own), islamic (the Qur'an and Tafsir recipe), demo (the built-in invented domain) or documents "
        "(documents without pairs: pairs are built from them); each kind's settings are in its section below. The "
        "old ingest:, pairs: and islamic: sections still load, with a warning.")
    filter: FilterConfig = Field(FilterConfig(), description="The consistency (or threshold) filter of the pairs.")
    vocab: VocabConfig = Field(VocabConfig(), description="Stage 1: the domain vocabulary.")
    train: TrainConfig = Field(TrainConfig(), description="The training stages.")
    eval_tasks: tuple[EvalTaskSpec, ...] = Field(
        (), description="Extra evaluation tasks; the held-out retrieval task of the run is always added."
    )
    eval_pool: int = Field(10_000, gt=0, description="Distractor documents of the held-out task.")
    gate: GateConfig = Field(GateConfig(), description="The publish gate.")
    glossary: GlossaryConfig | None = Field(
        None, description="Definitions of the domain's terms (a JSONL/CSV/TSV glossary, or MeSH descriptor XML): "
        "stage 1 adds the one-word terms on evidence of their own and learns their rows from their definitions, a "
        "dictionary stage trains the MLM on their definitions, and definition pairs join the training pairs of the "
        "adapted model and the control alike. None: no glossary (every run as without one).")
    control: Literal["contrastive", "none"] | None = Field(
        "contrastive", description="contrastive: also train the control a user would otherwise run — plain "
        "contrastive fine-tuning of the base on the same pairs, hard negatives and number of steps, with no domain "
        "vocabulary and no MLM — and publish the better of it and the adapted model, chosen on the validation pairs "
        "(the adapted model only when it is ahead beyond noise; see gate.beat_control); none (or null): no control.")
    export: tuple[Literal["onnx", "onnx-int8", "openvino", "static"], ...] = Field(
        (), description="Fast exports of the published model, written after publish beside models/current "
        "(models/exports/<kind>/, never replacing it), each verified against the PyTorch model (`mosaic export`; "
        "needs pip install -e '.[export]').")
    update: UpdateConfig = Field(UpdateConfig(), description="Update ticks: how a run that finds new pairs "
                                 "beside live models trains only on them (and a replay of earlier pairs).")
    tracking: TrackingConfig = Field(TrackingConfig(), description="MLflow tracking (TensorBoard is always on).")
    workers: int = Field(1, ge=1, description="Dask worker processes for the ingest and filter maps (1: threads).")
    dask_address: str | None = Field(
        None, description="Run the ingest and filter maps on this Dask cluster (e.g. tcp://scheduler:8786)."
    )

    @model_validator(mode="before")
    @classmethod
    def _old_source_sections(cls, data: object) -> object:
        return translate(data) if isinstance(data, dict) else data

    @field_validator("source", mode="before")
    @classmethod
    def _source_of_its_kind(cls, value: object) -> Source:
        return Source.parse(value)

    @model_validator(mode="after")
    def _consistent(self) -> PipelineConfig:
        if self.gate.beat_control and not self.trains_control:
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
        """Every task a pipeline run scores: its held-out pairs, its source's own tasks (the
        Islamic source's verses), then ``eval_tasks``."""
        return [t.name for t in self.eval_specs(".")]

    def eval_specs(self, data_root: str) -> tuple[EvalTask, ...]:
        """The tasks of :meth:`evaluated_tasks` for a run whose pairs live in ``data_root``."""
        pairs = {"path": data_root, "heldout_pairs": self.train.heldout_pairs, "query_column": self.train.query_column,
                 "document_column": self.train.document_column}
        heldout = HeldoutTask(name="heldout", pool=self.eval_pool, **pairs,
                               description=self.source.heldout_description)
        return (heldout, *self.source.eval_tasks(pairs), *self.eval_tasks)

    def training(self, dictionary: str | None = None, texts: int = 0, definition_pairs: str | None = None,
                 ) -> TrainConfig:
        """The run's training config: ``train``, with the glossary's dictionary stage on the
        ``texts`` dictionary texts at ``dictionary`` (``glossary.dictionary.epochs`` passes over
        them, at most its ``max_steps``) and its definition pairs at ``definition_pairs`` (the files
        the pipeline writes from ``glossary``) when it has a glossary."""
        if self.glossary is None:
            return self.train
        d, first = self.glossary.dictionary, self.train.stages[0]
        steps = min(math.ceil(d.epochs * texts / d.batch_size), d.max_steps or math.inf)
        stage = None if not steps or dictionary is None else StageConfig(
            name="dictionary", kind="mlm", pairs=dictionary, query_column="query", document_column="document",
            lr=d.lr, schedule="constant", batch_size=d.batch_size, max_steps=steps,
            mlm_probability=d.mlm_probability, seed=d.seed, warmup_ratio=0.0, prompts=first.prompts,
            model_kind=first.model_kind, precision=first.precision, document_max_length=first.document_max_length,
            query_max_length=first.query_max_length, log_every=first.log_every)
        pairs = definition_pairs if self.glossary.definition_pairs else None  # how many: in the file
        return self.train.model_copy(update={"dictionary": stage, "extra_pairs": pairs})

    @property
    def trains_control(self) -> bool:
        return self.control == "contrastive"

    @property
    def largest_batch(self) -> int:
        """The most pairs one optimizer step of any stage takes (its batch times its accumulation)."""
        return max(s.batch_size * s.accumulation for s in self.train.stages)

    def validation_spec(self, data_root: str) -> HeldoutTask:
        """The run's validation pairs as a retrieval task (as a training stage scores itself): what
        the adapted model and the control are chosen on, never the test pairs."""
        return HeldoutTask(name="validation", path=data_root, held="validation",
                           heldout_pairs=self.train.heldout_pairs, validation_pairs=self.train.validation_pairs,
                           pool=max(self.train.validation_pool, 1), query_column=self.train.query_column,
                           document_column=self.train.document_column,
                           description="the validation pairs (held out of training, not the test pairs)")

    def model_hash(self) -> str:
        """:meth:`config_hash` without the sections that do not change what a run trains (``update``,
        ``tracking``, ``workers``, ``dask_address``, ``export``): an update tick needs this unchanged
        since the live models' full rebuild."""
        blob = json.dumps(self.model_dump(mode="json", exclude={"update", "tracking", "workers", "dask_address",
                                                                 "export"}), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def gate_tasks(self) -> list[str]:
        """The tasks the publish gate compares models on."""
        return list(self.gate.tasks) if self.gate.tasks is not None else self.evaluated_tasks()

    def overridden(self, sets: dict[str, object]) -> PipelineConfig:
        """This config with each dotted field of ``sets`` replaced (``train.heldout_pairs``,
        ``source.path``, ``train.stages.0.max_steps``), read again as :meth:`load` reads a YAML:
        ``base_model`` and ``model_kind`` fill their copies too; a new ``source.kind`` starts that
        source from its defaults."""
        data = self.model_dump(mode="json")
        if "source.kind" in sets and sets["source.kind"] != self.source.kind:
            data["source"] = {}
        return PipelineConfig.load(with_sets(data, sets))

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
