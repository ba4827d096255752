"""A run's data source as a type: where its (query, document) pairs come from, and every
decision that follows from that, kept on the source's own config class.

``PipelineConfig.source`` holds one :class:`Source`, picked by its ``kind`` (``pubmed``,
``pairs``, ``islamic``, ``demo``, ``documents``). A source class declares: its fields; ``flow``, the flows-layer
function that puts its pairs into the data root; optionally ``watch`` (the files whose change
makes a scheduled rebuild run) and ``check`` (what is wrong with its input, found before a run
starts); the words of its funnel and of its held-out task; any evaluation task of its own.
Defining a subclass registers it: nothing else lists the kinds (docs/architecture.md, "Where
to add a data source").
"""

from __future__ import annotations

import hashlib
import json
import warnings
from typing import Any, ClassVar, Literal

from pydantic import Field

from mosaic_core.config_base import Frozen
from mosaic_core.config_data import IngestConfig, IslamicConfig, OwnPairsConfig
from mosaic_core.config_documents import DocumentsConfig
from mosaic_core.eval_tasks import EvalTask, VersesTask


class Source(Frozen):
    """Where a run's pairs come from; one ``kind`` per subclass."""

    kind: str = Field(..., description="Which source: each kind is a section below (pubmed, pairs, islamic, "
                      "demo, documents).")

    flow: ClassVar[str]
    """``module:function`` of the flows-layer function ``(source, cfg, data_root) -> (ingest
    manifests, filter manifests)`` that brings the pairs into the data root and filters them."""
    watch: ClassVar[str | None] = None
    """``module:function`` ``(source, data_root) -> files`` a scheduled rebuild compares with the last
    one's (it runs only when one is new or changed); None: every rebuild runs (caches keep it short)."""
    check: ClassVar[str | None] = None
    """``module:function`` ``(source, cfg)`` raising a clear error about the input before a run
    starts (it must not import torch); None: nothing to check beyond :meth:`inputs`."""
    funnel_words: ClassVar[tuple[str, str, str, str]] = (
        "rows read", "partition", "pairs after the source's rules", "pairs to filter")
    """The funnel's first steps in the source's words: what is read, what it is read in, what its
    own rules keep, what reaches the filter."""
    heldout_description: ClassVar[str] = "finding a held-out pair's document from its query, among other documents"
    relative_paths: ClassVar[tuple[str, ...]] = ()
    """Fields that a pipeline YAML (or the command line) gives relative to its own folder (the
    working directory)."""
    text_files: ClassVar[bool] = False
    """Whether its path may name .txt/.md files (documents): such a name is never a hub dataset's."""

    _kinds: ClassVar[dict[str, type[Source]]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        kind = cls.model_fields["kind"].default
        if not isinstance(kind, str):
            raise TypeError(f"{cls.__name__}: a source declares its kind as kind: Literal['name'] = 'name'")
        Source._kinds[kind] = cls

    @classmethod
    def kinds(cls) -> dict[str, type[Source]]:
        """Every registered source class by its kind."""
        return dict(cls._kinds)

    @classmethod
    def parse(cls, data: object) -> Source:
        """The source that ``data`` (a mapping with ``kind``, or a source) describes."""
        if isinstance(data, Source):
            return data
        if not isinstance(data, dict):
            raise ValueError(f"source must be a mapping with a kind ({', '.join(cls._kinds)}), not {data!r}")
        kind = data.get("kind", "pubmed")
        if kind not in cls._kinds:
            raise ValueError(f"source.kind {kind!r} is unknown: choose among {', '.join(sorted(cls._kinds))}")
        return cls._kinds[kind].model_validate({**data, "kind": kind})

    def config_hash(self) -> str:
        """The digest of its fields but ``kind``: a source keeps the cache keys its config had
        before sources were types."""
        blob = json.dumps(self.model_dump(mode="json", exclude={"kind"}), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def describe(self) -> str:
        """What the run reads, for messages (a path, a URL)."""
        return self.kind

    def inputs(self) -> dict[str, str]:
        """Local files the run reads, by field name: each must exist before a run starts."""
        return {}

    def eval_tasks(self, pairs: dict) -> tuple[EvalTask, ...]:
        """Evaluation tasks of the source's own beside the held-out pairs (``pairs``: the
        held-out task's path and columns)."""
        return ()


class PubMedSource(Source, IngestConfig):
    """A PubMed snapshot (NCBI's baseline and update files, a mirror, or local XML): each citation's
    title and abstract become a pair; a rebuild runs when the snapshot has new or changed files."""

    kind: Literal["pubmed"] = Field("pubmed", description="A PubMed snapshot.")
    flow: ClassVar[str] = "flows.ingest:pubmed_pairs"
    watch: ClassVar[str | None] = "flows.ingest:snapshot_files"
    funnel_words: ClassVar[tuple[str, str, str, str]] = (
        "citations parsed", "file", "pairs after the ingest filters", "latest pairs (revisions, deletions applied)")
    heldout_description: ClassVar[str] = "finding a held-out article's abstract from its title, among other abstracts"

    def describe(self) -> str:
        return self.source


class OwnPairsSource(Source, OwnPairsConfig):
    """Your own domain's (query, document) pairs: question and answer, title and body, claim and
    evidence, from files, a folder or a hub dataset."""

    kind: Literal["pairs"] = Field("pairs", description="Your own pairs.")
    flow: ClassVar[str] = "flows.own_pairs:own_pairs"
    check: ClassVar[str | None] = "tasks.own_pairs:check_pairs_at_hand"
    funnel_words: ClassVar[tuple[str, str, str, str]] = (
        "rows read", "partition", "pairs after the length and language filters", "pairs to filter")
    relative_paths: ClassVar[tuple[str, ...]] = ("path",)

    def describe(self) -> str:
        return self.path


class IslamicSource(Source, IslamicConfig):
    """The low-resource recipe: Qur'an verse pairs linked by Tafsir cross-references, kept at a
    cosine threshold of ``filter.model`` (in place of the consistency filter); the run is also
    scored on finding the verses a held-out verse's commentary cites."""

    kind: Literal["islamic"] = Field("islamic", description="The Qur'an and Tafsir recipe.")
    flow: ClassVar[str] = "flows.islamic:islamic_pairs"
    funnel_words: ClassVar[tuple[str, str, str, str]] = (
        "verse links read", "file", "verse pairs", "verse pairs to filter")
    heldout_description: ClassVar[str] = ("finding a held-out verse's Tafsir-linked verse among the verses of the "
                                          "pairs")

    def describe(self) -> str:
        return self.tafsir

    def inputs(self) -> dict[str, str]:
        return {"quran": self.quran, "tafsir": self.tafsir}

    def eval_tasks(self, pairs: dict) -> tuple[EvalTask, ...]:
        return (VersesTask(name="verses", collection=self.quran, **pairs,
                           description="finding the verses a held-out verse's Tafsir commentary cites, among every "
                           "verse of the Qur'an"),)


class DemoSource(Source):
    """The built-in demo's invented biomedical sub-field, generated into the data root
    (``DATA_ROOT/demo``) as a small PubMed snapshot; ``mosaic run`` without a config runs it with
    settings sized for a CPU."""

    kind: Literal["demo"] = Field("demo", description="The built-in demo.")
    seed: int = Field(0, description="The seed of the generated domain (its words' meanings and texts).")
    flow: ClassVar[str] = "flows.demo:demo_pairs"
    watch: ClassVar[str | None] = "flows.demo:snapshot_files"
    funnel_words: ClassVar[tuple[str, str, str, str]] = PubMedSource.funnel_words
    heldout_description: ClassVar[str] = PubMedSource.heldout_description

    def describe(self) -> str:
        return f"the demo (seed {self.seed})"


class DocumentsSource(Source, DocumentsConfig):
    """A domain given as documents alone (a folder of text files, JSONL/CSV/Parquet, a hub dataset):
    each is cut into passages, and pairs are made of the passages by ``builders`` — a title and its
    passage, a sentence and the passage around it (inverse cloze), two spans of one passage
    (cropping), queries a seq2seq model writes for it — then imported and filtered as own pairs
    are (docs/tutorials/documents.md)."""

    kind: Literal["documents"] = Field("documents", description="Documents without pairs.")
    flow: ClassVar[str] = "flows.documents:document_pairs"
    check: ClassVar[str | None] = "tasks.documents:check_documents_at_hand"
    funnel_words: ClassVar[tuple[str, str, str, str]] = (
        "pairs built from the documents' passages", "partition", "pairs after the length and language filters",
        "pairs to filter")
    heldout_description: ClassVar[str] = ("finding a held-out passage from a query built from it (its title, one of "
                                          "its sentences or spans, a generated question), among other passages")
    relative_paths: ClassVar[tuple[str, ...]] = ("path",)
    text_files: ClassVar[bool] = True

    def describe(self) -> str:
        return self.path


OLD_KEYS = {"ingest": "pubmed", "pairs": "pairs", "islamic": "islamic"}
"""The sections that named the source before ``source:`` did, and the kind each now is."""


def translate(data: dict) -> dict:
    """``data`` (a pipeline mapping) with an old ``ingest:``, ``pairs:`` or ``islamic:`` section
    moved into ``source:`` (with a warning saying how to write it now); an error for two sources."""
    old = [key for key in OLD_KEYS if data.get(key) is not None]
    if not old:
        return data
    given = old + (["source"] if data.get("source") is not None else [])
    if len(given) > 1:
        raise ValueError(f"{' and '.join(given)} each name the run's source: give one source: section")
    key = old[0]
    section = data[key]
    if not isinstance(section, dict):
        raise ValueError(f"{key}: must be a mapping of its settings, not {section!r}")
    message = (f"the {key}: section is now written source: {{kind: {OLD_KEYS[key]}, …}} (the same settings "
               "under source:); this one is read as such")
    warnings.warn(message, FutureWarning, stacklevel=2)
    rest = {k: v for k, v in data.items() if k not in OLD_KEYS}
    return {**rest, "source": {"kind": OLD_KEYS[key], **section}}
