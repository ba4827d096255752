"""Prefect task: a teacher cross-encoder's margins between each pair and its hard negatives
(MarginMSE's labels, GPL's pseudo-labels: :func:`mosaic_core.data.query_gen.teacher_margins`),
written beside the examples as a labelled examples file, one block of rows at a time.

The cached record is used only while the labelled file it names is whole on disk and was written
from the same source and teacher, so a deleted, damaged or overwritten file is labelled again."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from prefect import task
from prefect.context import TaskRunContext
from tqdm.auto import tqdm

from mosaic_core.data import query_gen
from mosaic_core.modeling.fingerprint import model_fingerprint
from mosaic_core.modeling.refs import resolve_model
from mosaic_core.versioning import code_version
from storage.examples import LABELLED, examples_file, map_examples, read_blocks, skipped_rows, whole, write_examples
from storage.pairs_io import corpus_fingerprint
from tasks.keys import cache_key
from tasks.results import SERIALIZER, json_only, results_beside, verified

log = logging.getLogger(__name__)
CODE_VERSION = code_version(query_gen)
LABEL_BLOCK = 2_048
"""Example rows read and labelled at a time (their texts and their negatives' texts in memory)."""


def _identity(p: dict) -> str:
    """What a labelled file is made of (source, teacher, columns, code): its cache key, and the
    fingerprint written into it, so a file another teacher or source wrote since is not taken."""
    return cache_key("margins", corpus_fingerprint(p["pairs_source"]), model_fingerprint(resolve_model(p["teacher"])),
                     p["query_column"], p["document_column"], CODE_VERSION, str(Path(p["out_path"]).resolve()))


@json_only
def _margins_key(context: TaskRunContext, p: dict) -> str:
    return _identity(p)


def _margins_output(p: dict) -> tuple[Path | None, bool]:
    return results_beside(p["out_path"]), whole(Path(p["out_path"]), LABELLED, _identity(p))


@verified(_margins_output)
@task(name="teacher-margins", cache_key_fn=_margins_key, persist_result=True, result_serializer=SERIALIZER,
      retries=0)
def with_margins(pairs_source: str, teacher: str, query_column: str, document_column: str, out_path: str,
                 examples_dir: str, batch_size: int = 32) -> str:
    """``out_path``, the pairs source a margin_mse stage reads: a labelled examples file
    (``.arrow``, :data:`storage.examples.LABELLED`) written here: the examples of ``pairs_source``
    (read through ``examples_dir``, as a stage reads them) with, for each hard negative, the
    ``teacher`` cross-encoder's score of (query, document) minus its score of (query, negative),
    scored ``batch_size`` pairs at a time on the GPU when there is one. Margins the source carries
    already (an earlier labelled file) are replaced: they may be another teacher's.

    Memory: the texts of :data:`LABEL_BLOCK` rows and their negatives'; the examples file itself
    is memory-mapped (a negative's text is read by its row number)."""
    source = examples_file(pairs_source, query_column, document_column, Path(examples_dir))
    table = map_examples(source)
    if not pc.sum(pc.list_value_length(table.column("negatives"))).as_py():
        raise ValueError(f"{pairs_source}: no pair has a hard negative, so there is no margin to label: mining found "
                         "none that its negative rule allows (too few distinct documents, or the rule's margin or "
                         "duplicate_cosine left every candidate out); give more pairs, loosen "
                         "train.negative_rule, or train with objective=infonce")
    import torch

    cross = query_gen.load_cross_encoder(resolve_model(teacher), "cuda" if torch.cuda.is_available() else "cpu")
    log.info("labelling the hard negatives of %d example rows of %s with %s", table.num_rows, pairs_source, teacher)
    with tqdm(total=table.num_rows, desc="teacher margins", unit="row", dynamic_ncols=True) as bar:
        identity = _identity({"pairs_source": pairs_source, "teacher": teacher, "query_column": query_column,
                              "document_column": document_column, "out_path": out_path})
        rows = write_examples(Path(out_path), _labelled(source, table, cross, batch_size, bar), skipped_rows(source),
                              identity, LABELLED)
    margins = pc.list_flatten(map_examples(Path(out_path)).column("margins")).to_numpy()
    log.info("labelled %d margins of %d rows with %s: mean %.3f, %.0f%% of them positive (the teacher ranks the "
             "pair's document above the negative)", len(margins), rows, teacher, float(np.mean(margins)),
             100 * float(np.mean(margins > 0)))
    return out_path


def _labelled(source: Path, table: pa.Table, cross: query_gen.Loaded, batch_size: int,
              bar: tqdm) -> Iterator[pa.RecordBatch]:
    """The rows of the examples file ``source`` with a ``margins`` column, block by block;
    ``table``: the same file memory-mapped, where a negative's document is read by its row."""
    documents = table.column("document")
    for block in read_blocks(source, LABEL_BLOCK):
        block = block.select(["query", "document", "negatives"])  # an earlier teacher's margins are dropped
        queries, docs = block.column("query").to_pylist(), block.column("document").to_pylist()
        refs = block.column("negatives").to_pylist()
        use = [i for i, q in enumerate(queries) if q is not None and refs[i]]
        texts = iter(documents.take(pa.array([n for i in use for n in refs[i]], pa.int64())).to_pylist())
        negatives = [[next(texts) for _ in refs[i]] for i in use]
        labels = query_gen.teacher_margins(cross, [queries[i] for i in use], [docs[i] for i in use], negatives,
                                           batch_size)
        margins: list[list[float]] = [[] for _ in queries]
        for i, m in zip(use, labels, strict=True):
            margins[i] = m
        bar.update(block.num_rows)
        column = pa.array(margins, LABELLED.field("margins").type)
        yield from block.append_column(LABELLED.field("margins"), column).to_batches()
