"""Evaluation task kinds: one frozen class per kind, each owning its settings, what its scores
depend on besides the model (:meth:`EvalTask.checksum`) and how its data becomes an mteb task
(:meth:`EvalTask.load`). :data:`EvalTaskSpec`, their union on ``kind``, is what
``EvalConfig.tasks`` and ``PipelineConfig.eval_tasks`` hold: ``{kind: beir, name: x, path: y}``
in YAML becomes a :class:`BeirTask`.

The kinds are configuration that ``config.py`` validates, so they sit beside it at the top of the
core and import nothing above it. What a kind reads and builds with therefore comes in as
:class:`TaskReaders`: the files' readers (``storage``'s, which the core never imports) and the
evaluation's builders (mteb tasks, held-out splits, the verse collection). ``tasks/evaluate.py``
passes the real ones, made by :func:`mosaic_core.evaluate.task_readers.task_readers`.

A new kind is a subclass here with ``kind: Literal["its name"]``, its own fields,
``data_checksum`` and ``load``, added to :data:`KINDS` (docs/architecture.md, "Where to add an
evaluation task kind")."""

from __future__ import annotations

import hashlib
import json
import logging
from abc import abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Field, Tag, field_validator

from mosaic_core.config_base import Frozen, file_name

__all__ = ["KINDS", "BeirTask", "EvalTask", "EvalTaskSpec", "HeldoutTask", "MtebTask", "PairsTask", "StsTask",
           "TaskReaders", "VersesTask", "tagged_union"]

log = logging.getLogger(__name__)
Pair = tuple[str, str]


@dataclass(frozen=True)
class TaskReaders:
    """What a kind reads its data and builds its mteb task with (injected: see the module)."""

    # The files: storage's readers. Each raises an error naming the file and what to fix.
    read_beir: Callable[[Path, str | None], Any]
    """(folder, qrels split or None) → data with corpus, queries, qrels, description, skipped {reason: n}."""
    read_sts: Callable[[Path], Any]
    """file → data with rows, min_score, max_score, skipped (a count)."""
    pair_batches: Callable[[str, str, str, dict[str, int]], Iterable[Any]]
    """(pairs source, query column, document column, skipped counts to fill) → record batches."""
    corpus_fingerprint: Callable[[str], str]
    """A pairs file's or a data root's content digest."""
    recorded_split: Callable[[str, int, int], Any]
    """(pairs source, test pairs, validation pairs) → the held-out thresholds its data root recorded
    (:class:`~mosaic_core.trainer.heldout.Kept`; none for a pairs file)."""
    files_digest: Callable[[Path], str | None]
    """The digest of every file under a folder; None when it is no folder or holds none."""
    mteb_version: Callable[[], str]
    """The installed mteb's version: what an mteb task's data is."""
    # The evaluation's builders.
    hub_task: Callable[[str], Any]
    """An mteb task by name with its data loaded."""
    retrieval_task: Callable[..., Any]
    """(name, corpus, queries, qrels, description, ignore_identical_ids=False) → an mteb retrieval task."""
    sts_task: Callable[..., Any]
    """(name, rows, min_score, max_score, description) → an mteb STS task."""
    heldout_split: Callable[..., tuple[list[Pair], list[str], int]]
    """(batches, n_test, pool, n_validation, held, kept) → (held-out pairs, distractors, number of pairs)."""
    heldout_retrieval: Callable[[list[Pair], list[str]], tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]]
    """(held-out pairs, distractors) → (corpus, queries, qrels)."""
    read_verses: Callable[[Path], dict[tuple[int, int], str]]
    """A 'sura|aya|text' translation file → {(sura, aya): text}."""
    verse_retrieval_data: Callable[..., tuple[list[dict], dict[str, str], dict[str, dict[str, int]], int]]
    """(held-out links, verses) → (corpus, queries, qrels, links citing no verse)."""
    unavailable: type[Exception]
    """What :meth:`EvalTask.load` raises when the task's data cannot be had (the flow lists them all)."""


_FLAT_DEFAULTS = {"path": None, "collection": None, "split": None, "pool": 10_000, "heldout_pairs": 256,
                  "held": "test", "validation_pairs": 0, "query_column": "query", "document_column": "document"}
"""Every field of the one flat spec the kinds were before they were classes, at its default: a
kind's definition is hashed with these filled in, so the checksums (and the evaluations cached
on them) of the tasks written before stay valid."""


class EvalTask(Frozen):
    """One evaluation task: the base of every kind (its ``kind``, ``name`` and ``description``)."""

    kind: str = Field(..., description="Which kind of task: each kind is a class with its own fields.")
    name: str = Field(..., min_length=1, description="mteb task name, or the label of a local task (it names the "
                      "task's predictions file: no '/', '\\', '.' or '..').")
    description: str | None = Field(
        None, description="What the task asks, in words a newcomer understands (the run report leads with it).")

    @field_validator("name")
    @classmethod
    def _a_file_name(cls, name: str) -> str:
        return file_name(name, "an evaluation task's name")

    @abstractmethod
    def data_checksum(self, readers: TaskReaders) -> str:
        """A digest of the task's data: its files' content, a data root's manifests, a library's version."""

    @abstractmethod
    def load(self, readers: TaskReaders) -> Any:
        """The mteb task object with its data in memory; raises ``readers.unavailable`` (or the
        readers' own errors, which name the file) when the data cannot be had."""

    def checksum(self, readers: TaskReaders) -> str:
        """What the task's scores depend on besides the model: its data and its definition
        (``evaltask-<24 hex>``, the digest ``tasks/keys.py: cache_key`` makes of the two)."""
        fields = json.dumps({**_FLAT_DEFAULTS, **self.model_dump(mode="json")}, sort_keys=True)
        definition = hashlib.sha256(fields.encode()).hexdigest()[:16]
        return "evaltask-" + hashlib.sha256(f"{self.data_checksum(readers)}|{definition}".encode()).hexdigest()[:24]

    def source(self) -> str:
        """Where the task's data comes from, for reports: its path ('' for a hub task)."""
        return str(getattr(self, "path", None) or "")

    def inputs(self) -> dict[str, str]:
        """Local files or folders the task reads, by field name: each must exist before a run starts."""
        return {"path": self.path} if isinstance(getattr(self, "path", None), str) else {}


class MtebTask(EvalTask):
    """An mteb task by name, with mteb's own data (the Hugging Face hub or its cache)."""

    kind: Literal["mteb"] = Field(
        "mteb", description="mteb: an mteb task by name, its data from the Hugging Face hub or cache.")

    def data_checksum(self, readers: TaskReaders) -> str:
        return f"mteb-{readers.mteb_version()}"

    def load(self, readers: TaskReaders) -> Any:
        return readers.hub_task(self.name)


class BeirTask(EvalTask):
    """A BEIR folder: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``."""

    kind: Literal["beir"] = Field(
        "beir", description="beir: a BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).")
    path: str = Field(..., min_length=1, description="The BEIR folder.")
    split: str | None = Field(None, description="BEIR qrels split (default: test, or the only one).")

    def data_checksum(self, readers: TaskReaders) -> str:
        path = Path(self.path).expanduser()
        return readers.files_digest(path) or readers.corpus_fingerprint(str(path))

    def load(self, readers: TaskReaders) -> Any:
        data = readers.read_beir(Path(self.path).expanduser(), self.split)
        if any(data.skipped.values()):
            log.warning("%s: skipped %s", self.name, data.skipped)
        return readers.retrieval_task(self.name, data.corpus, data.queries, data.qrels, data.description)


class StsTask(EvalTask):
    """An STS file (.jsonl/.csv/.tsv/.parquet) with ``sentence1``, ``sentence2`` and ``score``."""

    kind: Literal["sts"] = Field(
        "sts", description="sts: an STS file (sentence1, sentence2, score).")
    path: str = Field(..., min_length=1, description="The STS file.")

    def data_checksum(self, readers: TaskReaders) -> str:
        return readers.corpus_fingerprint(str(Path(self.path).expanduser()))

    def load(self, readers: TaskReaders) -> Any:
        data = readers.read_sts(Path(self.path).expanduser())
        if data.skipped:
            log.warning("%s: skipped %d unusable rows", self.name, data.skipped)
        return readers.sts_task(self.name, data.rows, data.min_score, data.max_score, f"STS file {self.path}")


class PairsTask(EvalTask):
    """The base of the kinds that hold pairs of a pairs source out, as training does (no kind itself)."""

    path: str = Field(..., min_length=1, description="The pairs source: a pairs file or a data root.")
    heldout_pairs: int = Field(256, gt=0, description="Pairs held out (must match training: a data root's recorded "
                               "split for that number applies).")
    query_column: str = Field("query", description="Column of a pairs file that holds the queries.")
    document_column: str = Field("document", description="Column of a pairs file that holds the documents.")

    def data_checksum(self, readers: TaskReaders) -> str:
        return readers.corpus_fingerprint(str(Path(self.path).expanduser()))

    def held_out(self, readers: TaskReaders, pool: int, n_validation: int = 0,
                 held: str = "test") -> tuple[list[Pair], list[str]]:
        """(held-out pairs, up to ``pool`` distractor documents) of the source; raises
        ``readers.unavailable`` when it has too few pairs to hold any out."""
        skipped: list[dict[str, int]] = []  # per pass over the source: each pass counts the same rows

        def batches() -> Iterable[Any]:
            skipped.append({})
            return readers.pair_batches(self.path, self.query_column, self.document_column, skipped[-1])
        kept = readers.recorded_split(self.path, self.heldout_pairs, n_validation)
        heldout, distractors, n = readers.heldout_split(batches, self.heldout_pairs, pool, n_validation, held, kept)
        if sum(skipped[0].values()):
            log.warning("%s: skipped %d rows without a usable %s/%s (%s)", self.path, sum(skipped[0].values()),
                        self.query_column, self.document_column,
                        ", ".join(f"{k} {v}" for k, v in skipped[0].items()))
        if not heldout:
            raise readers.unavailable(f"{self.name}: {self.path} has too few pairs ({n}) to hold any out")
        return heldout, distractors


class HeldoutTask(PairsTask):
    """A run's held-out pairs: each held-out query retrieves its document among the held-out
    documents and distractors from the training pairs."""

    kind: Literal["heldout"] = Field(
        "heldout", description="heldout: the pairs a pairs source holds out, as training holds them out.")
    pool: int = Field(10_000, gt=0, description="Distractor documents from the training pairs.")
    held: Literal["test", "validation"] = Field(
        "test", description="Retrieve the test pairs (the lowest heldout_pairs content hashes, or a data root's "
        "recorded test pairs), or the validation pairs (the next validation_pairs) with distractors from the training "
        "pairs only, as a training stage's validation does.")
    validation_pairs: int = Field(0, ge=0, description="held validation: the run's validation_pairs.")

    def load(self, readers: TaskReaders) -> Any:
        heldout, distractors = self.held_out(readers, self.pool, self.validation_pairs, self.held)
        corpus, queries, qrels = readers.heldout_retrieval(heldout, distractors)
        return readers.retrieval_task(self.name, corpus, queries, qrels, f"held-out pairs of {self.path}: "
                                      f"{len(queries)} queries, {len(corpus)} documents")


class VersesTask(PairsTask):
    """The Islamic held-out verse links: each held-out verse retrieves the verses its Tafsir
    commentary cites, among every verse of the collection."""

    kind: Literal["verses"] = Field(
        "verses", description="verses: the Islamic held-out verse links, over a verse collection.")
    collection: str = Field(..., min_length=1, description="The Qur'an translation ('sura|aya|text' lines) whose "
                            "verses are the corpus.")

    def data_checksum(self, readers: TaskReaders) -> str:
        return super().data_checksum(readers) + readers.corpus_fingerprint(str(Path(self.collection).expanduser()))

    def inputs(self) -> dict[str, str]:
        return {**super().inputs(), "collection": self.collection}

    def load(self, readers: TaskReaders) -> Any:
        heldout, _ = self.held_out(readers, 0)
        try:
            verses = readers.read_verses(Path(self.collection).expanduser())
        except (OSError, ValueError) as exc:
            raise readers.unavailable(f"{self.name}: cannot read the verse collection {self.collection}: {exc}. "
                                      "Pass the Sahih International translation as 'sura|aya|text' lines") from exc
        corpus, queries, qrels, missing = readers.verse_retrieval_data(heldout, verses)
        if missing:
            log.warning("%s: %d of %d held-out links cite a text that is no verse of %s; left out", self.name,
                        missing, len(heldout), self.collection)
        if not queries:
            raise readers.unavailable(f"{self.name}: no held-out link of {self.path} cites a verse of "
                                      f"{self.collection}; are these Tafsir verse pairs (`mosaic pairs islamic`)?")
        return readers.retrieval_task(
            self.name, corpus, queries, qrels, f"held-out Tafsir links of {self.path}: {len(queries)} verses over "
            f"{len(corpus)} verse texts", ignore_identical_ids=True)


KINDS: tuple[type[EvalTask], ...] = (MtebTask, BeirTask, StsTask, HeldoutTask, VersesTask)
"""Every kind :data:`EvalTaskSpec` reads: a new kind's class is added here."""


def _kind(value: Any) -> Any:
    return value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)


def tagged_union(kinds: tuple[type[EvalTask], ...]) -> Any:
    """The union of ``kinds`` read by its ``kind`` (each class's ``Literal`` default), with one
    error naming every kind when a task has none of them."""
    names = [k.model_fields["kind"].default for k in kinds]
    # A function, not Field(discriminator="kind"): pydantic refuses a discriminator field with a
    # mode="before" validator, and Frozen's (no booleans for numbers) applies to every field.
    return Annotated[Union[tuple(Annotated[k, Tag(n)] for k, n in zip(kinds, names, strict=True))],
                     Discriminator(_kind, custom_error_type="eval_task_kind", custom_error_message=(
                         "an evaluation task is a mapping whose kind is one of " + ", ".join(names)))]


EvalTaskSpec = tagged_union(KINDS)
"""Any evaluation task kind, read by its ``kind``: one of :data:`KINDS`."""
