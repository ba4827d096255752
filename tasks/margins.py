"""Prefect task: a teacher cross-encoder's margins between each pair and its hard negatives
(MarginMSE's labels, GPL's pseudo-labels: :func:`mosaic_core.data.query_gen.teacher_margins`),
written beside the examples as a labelled examples file, one block of rows at a time.

The cached record is used only while the labelled file it names is whole on disk and was written
from the same source and teacher, so a deleted, damaged or overwritten file is labelled again."""

from __future__ import annotations

import logging
import math
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
from mosaic_core.trainer import PairSet
from mosaic_core.trainer.heldout import training_examples
from mosaic_core.versioning import code_version
from storage.examples import (
    LABELLED,
    examples_file,
    map_examples,
    read_batches,
    read_blocks,
    skipped_rows,
    whole,
    write_examples,
)
from storage.heldout import split_origin
from storage.pairs_io import corpus_fingerprint
from tasks.heldout import recorded_split
from tasks.keys import cache_key
from tasks.results import SERIALIZER, json_only, results_beside, verified

log = logging.getLogger(__name__)
CODE_VERSION = code_version(query_gen)
LABEL_BLOCK = 2_048
"""Example rows read and labelled at a time (their texts and their negatives' texts in memory)."""


def _identity(p: dict) -> str:
    """What a labelled file is made of (source, teacher, columns, code, the data root whose split
    it follows): its cache key, and the fingerprint written into it, so a file another teacher or
    source wrote since is not taken."""
    return cache_key("margins", corpus_fingerprint(p["pairs_source"]), model_fingerprint(resolve_model(p["teacher"])),
                     p["query_column"], p["document_column"], str(p["negatives"]), str(tuple(p["held_out"])),
                     CODE_VERSION, str(Path(p["out_path"]).resolve()), f"split of {split_origin(p['pairs_source'])}")


@json_only
def _margins_key(context: TaskRunContext, p: dict) -> str:
    return _identity(p)


def _margins_output(p: dict) -> tuple[Path | None, bool]:
    return results_beside(p["out_path"]), whole(Path(p["out_path"]), LABELLED, _identity(p))


@verified(_margins_output)
@task(name="teacher-margins", cache_key_fn=_margins_key, persist_result=True, result_serializer=SERIALIZER,
      retries=0)
def with_margins(pairs_source: str, teacher: str, query_column: str, document_column: str, negatives: int,
                 held_out: tuple[int, int], out_path: str, examples_dir: str, batch_size: int = 32) -> str:
    """``out_path``, the pairs source a margin_mse stage reads: a labelled examples file
    (``.arrow``, :data:`storage.examples.LABELLED`) written here: the examples of ``pairs_source``
    (read through ``examples_dir``, as a stage reads them) with the ``teacher`` cross-encoder's
    score of (query, document) minus its score of (query, negative) for each hard negative the
    stage will train on: the first ``negatives`` of each training pair's, once the split holding
    ``held_out`` (test, validation) pairs out has skipped its documents, as
    :func:`~mosaic_core.trainer.heldout.training_examples` gives them. Other negatives (a filtered
    data root keeps three per pair) and held-out pairs are not scored: their margins are NaN.
    Scored ``batch_size`` pairs at a time, on the GPU when there is one. Margins the source
    carries already (an earlier labelled file) are replaced: they may be another teacher's.

    Memory: the texts of :data:`LABEL_BLOCK` rows and their negatives', and a row number and two
    flags per row; the examples file itself is memory-mapped (a negative's text is read by its
    row number)."""
    source = examples_file(pairs_source, query_column, document_column, Path(examples_dir))
    table = map_examples(source)
    if not pc.sum(pc.list_value_length(table.column("negatives"))).as_py():
        raise ValueError(f"{pairs_source}: no pair has a hard negative, so there is no margin to label: mining found "
                         "none that its negative rule allows (too few distinct documents, or the rule's margin or "
                         "duplicate_cosine left every candidate out); give more pairs, loosen "
                         "train.negative_rule, or train with objective=infonce")
    import torch

    train = training_examples(PairSet(table), lambda: read_batches(source), *held_out,
                              recorded_split(pairs_source, *held_out))
    training = np.zeros(table.num_rows, dtype=bool)
    training[train.rows] = True
    cross = query_gen.load_cross_encoder(resolve_model(teacher), "cuda" if torch.cuda.is_available() else "cpu")
    log.info("labelling up to %d hard negatives of each of %d training pairs of %s with %s", negatives, len(train),
             pairs_source, teacher)
    with tqdm(total=table.num_rows, desc="teacher margins", unit="row", dynamic_ncols=True) as bar:
        identity = _identity({"pairs_source": pairs_source, "teacher": teacher, "query_column": query_column,
                              "document_column": document_column, "negatives": negatives, "held_out": held_out,
                              "out_path": out_path})
        labelled = _labelled(source, table, training, train.skip, negatives, cross, batch_size, bar)
        rows = write_examples(Path(out_path), labelled, skipped_rows(source), identity, LABELLED,
                              split_origin(pairs_source))
    margins = pc.list_flatten(map_examples(Path(out_path)).column("margins")).to_numpy()
    margins = margins[~np.isnan(margins)]
    if not len(margins):
        raise ValueError(f"{pairs_source}: no training pair has a hard negative outside the held-out pairs' "
                         "documents, so there is no margin to label; give more pairs or train with objective=infonce")
    log.info("labelled %d margins (of %d rows) with %s: mean %.3f, %.0f%% of them positive (the teacher ranks the "
             "pair's document above the negative)", len(margins), rows, teacher, float(np.mean(margins)),
             100 * float(np.mean(margins > 0)))
    return out_path


def _labelled(source: Path, table: pa.Table, training: np.ndarray, skip: np.ndarray | None, per_pair: int,
              cross: query_gen.Loaded, batch_size: int, bar: tqdm) -> Iterator[pa.RecordBatch]:
    """The rows of the examples file ``source`` with a ``margins`` column, block by block: for a
    training row (``training``, per table row), the margins of the first ``per_pair`` of its
    negatives whose documents are not skipped (``skip``, per table row; None: none is), NaN for
    every other negative; ``table``: the same file memory-mapped, where a negative's document is
    read by its row."""
    documents = table.column("document")
    lo = 0
    for block in read_blocks(source, LABEL_BLOCK):
        block = block.select(["query", "document", "negatives"])  # an earlier teacher's margins are dropped
        queries, docs = block.column("query").to_pylist(), block.column("document").to_pylist()
        refs = block.column("negatives").to_pylist()
        # per training row of the block: the positions of its negatives the stage trains with
        picked = {i: [j for j, n in enumerate(refs[i]) if skip is None or not skip[n]][:per_pair]
                  for i in range(len(queries)) if training[lo + i]}
        picked = {i: js for i, js in picked.items() if js}
        texts = iter(documents.take(pa.array([refs[i][j] for i, js in picked.items() for j in js],
                                             pa.int64())).to_pylist())
        negatives = [[next(texts) for _ in js] for js in picked.values()]
        labels = query_gen.teacher_margins(cross, [queries[i] for i in picked], [docs[i] for i in picked], negatives,
                                           batch_size)
        margins = [[math.nan] * len(r) for r in refs]
        for (i, js), m in zip(picked.items(), labels, strict=True):
            for j, value in zip(js, m, strict=True):
                margins[i][j] = value
        lo += block.num_rows
        bar.update(block.num_rows)
        column = pa.array(margins, LABELLED.field("margins").type)
        yield from block.append_column(LABELLED.field("margins"), column).to_batches()
