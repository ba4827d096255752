"""Evaluation through mteb: hub tasks by name, and local data wrapped as mteb tasks so that
the scoring is mteb's own (NDCG@10 for retrieval, Spearman of cosine for STS).

Per-query NDCG@10 (for the box plot) comes from mteb's saved predictions, scored with
pytrec_eval exactly as mteb scores the aggregate.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)
Pair = tuple[str, str]

MEDICAL_TASKS = ("BIOSSES", "SciFact", "NFCorpus", "MedicalQARetrieval", "TRECCOVID", "BiorxivClusteringP2P",
                 "MedrxivClusteringP2P", "MedrxivClusteringS2S")
"""The MTEB medical subset the paper reports (docs/method.md, Evaluation)."""


class TaskUnavailable(RuntimeError):
    """A task's data cannot be loaded; the message names the task and how to provide it."""


@dataclass
class TaskScore:
    task: str
    metric: str
    value: float
    n: int = 0
    scores: dict[str, float] = field(default_factory=dict)
    per_query: dict[str, float] | None = None
    dim: int | None = None
    """The embeddings were cut to their first ``dim`` components (Matryoshka); None: whole."""


def _metadata(name: str, kind: str, main_score: str, description: str):
    from mteb.abstasks.task_metadata import TaskMetadata

    return TaskMetadata(
        name=name, dataset={"path": f"local/{name}", "revision": "local"}, description=description,
        reference=None, type=kind, category="t2t", modalities=["text"], eval_splits=["test"],
        eval_langs=["eng-Latn"], main_score=main_score, date=None, domains=None, task_subtypes=None, license=None,
        annotations_creators=None, dialect=None, sample_creation=None, bibtex_citation=None,
    )


def retrieval_task(name: str, corpus: list[dict], queries: dict[str, str], qrels: dict[str, dict[str, int]],
                   description: str = "local retrieval task", ignore_identical_ids: bool = False):
    """An mteb retrieval task over in-memory data: ``corpus`` [{id, title, text}],
    ``queries`` {id: text}, ``qrels`` {query id: {doc id: grade}}. ``ignore_identical_ids``
    drops a document from a query's ranking when their ids are equal (the query itself)."""
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval

    class LocalRetrieval(AbsTaskRetrieval):
        metadata = _metadata(name, "Retrieval", "ndcg_at_10", description)

        def load_data(self, **kwargs) -> None:
            if self.data_loaded:
                return
            self.dataset = {"default": {"test": {
                "corpus": Dataset.from_list(corpus),
                "queries": Dataset.from_list([{"id": q, "text": t} for q, t in queries.items()]),
                "relevant_docs": qrels, "top_ranked": None}}}
            self.data_loaded = True

    task = LocalRetrieval()
    task.ignore_identical_ids = ignore_identical_ids
    return task


def sts_task(name: str, rows: list[dict], min_score: float, max_score: float, description: str = "local STS task"):
    """An mteb STS task over rows {sentence1, sentence2, score}."""
    from datasets import Dataset
    from mteb.abstasks.sts import AbsTaskSTS

    class LocalSTS(AbsTaskSTS):
        metadata = _metadata(name, "STS", "cosine_spearman", description)

        def load_data(self, **kwargs) -> None:
            if self.data_loaded:
                return
            self.dataset = {"default": {"test": Dataset.from_list(rows)}}
            self.data_loaded = True

    task = LocalSTS()
    task.min_score, task.max_score = min_score, max_score
    return task


def hub_task(name: str):
    """An mteb task by name with its data loaded (hub or local HF cache), else :class:`TaskUnavailable`."""
    import mteb

    try:
        task = mteb.get_task(name)
    except KeyError as exc:
        raise TaskUnavailable(f"{name}: not an mteb task name") from exc
    try:
        task.load_data()
    except Exception as exc:  # noqa: BLE001 - any loader failure means "not available here"
        raise TaskUnavailable(
            f"{name}: its data could not be loaded from the Hugging Face hub or cache ({type(exc).__name__}: "
            f"{str(exc)[:160]}). Run once with network access to fill the cache, or pass the files: "
            "--beir DIR (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) or --sts FILE (sentence1, sentence2, score)"
        ) from exc
    return task


def verse_retrieval_data(heldout: list[Pair], verses: dict[tuple[int, int], str],
                         ) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]], int]:
    """Verse-to-verse retrieval from Tafsir cross-references kept out of training: each
    held-out commented verse is a query, its held-out cited verses are relevant, and the corpus
    is every verse of the translation (verses of identical text are one document, named after
    the first). A query's own verse is a document too; it shares the query's id so that mteb's
    ``ignore_identical_ids`` leaves it out of that query's ranking.

    Returns (corpus, queries, qrels, held-out links whose cited text is not a verse)."""
    doc_of: dict[str, str] = {}
    for (sura, aya), text in verses.items():
        doc_of.setdefault(text, f"{sura}:{aya}")
    corpus = [{"id": i, "title": "", "text": t} for t, i in doc_of.items()]
    queries, qrels, missing = {}, {}, 0
    for query, cited in heldout:
        if cited not in doc_of:
            missing += 1
            continue
        qid = doc_of.get(query) or f"q:{hashlib.blake2b(query.encode(), digest_size=6).hexdigest()}"
        queries[qid] = query
        if doc_of[cited] != qid:
            qrels.setdefault(qid, {})[doc_of[cited]] = 1
    queries = {q: t for q, t in queries.items() if q in qrels}
    return corpus, queries, qrels, missing


def per_query_ndcg10(predictions: Path, qrels: dict[str, dict[str, int]],
                     ignore_identical_ids: bool = False) -> dict[str, float]:
    """NDCG@10 of each query from an mteb predictions file, scored by pytrec_eval as mteb does
    (mteb saves a query's own document in the predictions and drops it only when scoring)."""
    import pytrec_eval

    runs = json.loads(predictions.read_text())["default"]["test"]
    if ignore_identical_ids:
        runs = {q: {d: s for d, s in docs.items() if d != q} for q, docs in runs.items()}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"})
    return {q: s["ndcg_cut_10"] for q, s in evaluator.evaluate(runs).items()}


def load_scored_model(model_path: str, kind: str = "auto", prompts: dict | None = None, dim: int | None = None):
    """What mteb scores: a ``SentenceTransformer``, or a ``SparseEncoder`` for a sparse model
    (``auto``: when the model is one; ``sparse``: also SPLADE on a plain masked-LM checkpoint).
    Its query and document prompts (``prompts``, else what it declares under any of the names
    :mod:`~mosaic_core.modeling.prompts` knows) are set as ``query`` and ``document``, the
    names mteb applies to a retrieval task's queries and documents. ``dim``: a dense model's
    embeddings cut to their first ``dim`` components and compared by cosine (the prefixes
    renormalised, as a Matryoshka model is trained and used)."""
    from sentence_transformers import SentenceTransformer

    from mosaic_core.modeling.prompts import DOCUMENT_NAMES, QUERY_NAMES, resolve_prompts
    from mosaic_core.modeling.sparse import is_sparse_model, sparse_encoder

    if kind == "sparse" or (kind == "auto" and is_sparse_model(model_path)):
        model = sparse_encoder(model_path, device=None)
    else:
        model = SentenceTransformer(model_path, device=None)
    if dim is not None:
        truncate(model, dim, model_path)
    chosen = resolve_prompts(model_path, prompts)
    others = {k: v for k, v in (model.prompts or {}).items() if k not in QUERY_NAMES + DOCUMENT_NAMES}
    model.prompts = {**others, **{k: v for k, v in chosen.as_dict().items() if v}}
    if model.default_prompt_name not in model.prompts:
        model.default_prompt_name = None
    return model


def truncate(model, dim: int, model_path: str) -> None:
    """Make ``model`` (a ``SentenceTransformer``) encode to its first ``dim`` components, scored by
    cosine; a clear error for a sparse model or a ``dim`` above the embedding size."""
    from sentence_transformers import SentenceTransformer

    if not isinstance(model, SentenceTransformer):
        raise ValueError(f"{model_path} is a sparse (SPLADE) model: its dimensions are vocabulary entries and "
                         "cannot be cut; score it without --dims")
    size = model.get_embedding_dimension()
    if dim > size:
        raise ValueError(f"--dims {dim}: {model_path} has {size}-d embeddings; give dimensions of at most {size}")
    model.truncate_dim = dim
    model.similarity_fn_name = "cosine"  # the prefixes renormalised, whatever the model's own function


class KeptVectors:
    """An mteb encoder that keeps what ``model`` (an mteb encoder) made of each text: per task and
    role, ``store(folder / task / role)`` (an object with ``load``, ``get_vector``, ``add``,
    ``save``, mteb's cache backend protocol) holds the vectors; only the items it has none for
    are encoded, in the batches mteb prepared them in. (mteb's own ``CachedEmbeddingWrapper``
    prepares the items it encodes a second time, which writes a titled document's title twice.)"""

    def __init__(self, model, folder: Path, store: type):
        self._model, self._folder, self._store = model, Path(folder), store

    @property
    def mteb_model_meta(self):
        return self._model.mteb_model_meta

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None, **kwargs):
        from torch.utils.data import DataLoader

        items = inputs.dataset
        store = self._store(self._folder / task_metadata.name / (prompt_type.value if prompt_type else "all"))
        store.load()
        found = [store.get_vector(item) for item in items]
        missing = [i for i, v in enumerate(found) if v is None]
        if missing:
            subset = items.select(missing)
            loader = DataLoader(subset, batch_size=inputs.batch_size, collate_fn=inputs.collate_fn, shuffle=False)
            new = self._model.encode(loader, task_metadata=task_metadata, hf_split=hf_split, hf_subset=hf_subset,
                                     prompt_type=prompt_type, **kwargs)
            new = np.asarray(new.float().cpu() if hasattr(new, "cpu") else new, dtype=np.float32)
            store.add(list(subset), new)
            store.save()
            for i, vector in zip(missing, new, strict=True):
                found[i] = vector
        return np.stack(found) if found else np.zeros((0, 0), np.float32)

    def similarity(self, embeddings1, embeddings2):
        return self._model.similarity(embeddings1, embeddings2)

    def similarity_pairwise(self, embeddings1, embeddings2):
        return self._model.similarity_pairwise(embeddings1, embeddings2)


def score_task(model_path: str, task, work_dir: Path, batch_size: int = 64, kind: str = "auto",
               prompts: dict | None = None, dim: int | None = None, vectors: tuple[Path, type] | None = None,
               ) -> TaskScore:
    """Run ``task`` with the model at ``model_path`` (:func:`load_scored_model`) through
    ``mteb.evaluate``. ``vectors``: (a folder, a store class): a dense model's embeddings kept
    there per task, role and text, so that only texts it has not encoded are encoded
    (:class:`KeptVectors`)."""
    import mteb
    from sentence_transformers import SentenceTransformer

    model = load_scored_model(model_path, kind, prompts, dim)
    if vectors is not None and isinstance(model, SentenceTransformer):
        from mteb.models import SentenceTransformerEncoderWrapper

        model = KeptVectors(SentenceTransformerEncoderWrapper(model), *vectors)
    work_dir.mkdir(parents=True, exist_ok=True)
    task.load_data()
    first_split = task.metadata.eval_splits[0]
    data = (task.dataset or {}).get("default", {}).get(first_split)
    n = len(data) if task.metadata.type == "STS" and data is not None else 0
    qrels = data.get("relevant_docs") if task.metadata.type == "Retrieval" and data is not None else None
    qrels = {q: dict(d) for q, d in qrels.items()} if qrels is not None else None  # mteb unloads data after use
    with warnings.catch_warnings():  # mteb 2 calls a method sentence-transformers 6 renamed: not the user's to fix
        warnings.filterwarnings("ignore", message=".*get_sentence_embedding_dimension", category=FutureWarning)
        result = mteb.evaluate(model, [task], cache=None, prediction_folder=work_dir, show_progress_bar=False,
                               encode_kwargs={"batch_size": batch_size, "show_progress_bar": False})  # its search's
    (task_result,) = result.task_results
    split = "test" if "test" in task_result.scores else next(iter(task_result.scores))
    main = task_result.scores[split][0]
    name = task.metadata.name
    per_query = None
    pred = work_dir / f"{name}_predictions.json"
    if qrels is not None and pred.is_file():
        per_query = per_query_ndcg10(pred, qrels, task.ignore_identical_ids)
        n = len(per_query)
    numbers = {k: float(v) for k, v in main.items() if isinstance(v, (int, float)) and math.isfinite(v)}
    return TaskScore(name, task.metadata.main_score, float(main["main_score"]), n, numbers, per_query, dim)
