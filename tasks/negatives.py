"""Prefect task: hard negatives for pairs that have none, mined with the consistency filter's own
search (:func:`mosaic_core.data.consistency.consistency_filter`), one chunk at a time. The cached
record is used only while the mined file it names is whole on disk and was mined for the same
source and settings, so a deleted, damaged or overwritten file is mined again."""

from __future__ import annotations

import json
import logging
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
from prefect import task
from prefect.context import TaskRunContext
from tqdm.auto import tqdm

from mosaic_core.config_data import NegativeRule
from mosaic_core.data import consistency
from mosaic_core.modeling import encode
from mosaic_core.modeling.encode import Encoder
from mosaic_core.modeling.fingerprint import model_fingerprint
from mosaic_core.modeling.refs import resolve_model
from mosaic_core.trainer import PairSet
from mosaic_core.trainer.heldout import text_hashes
from mosaic_core.versioning import code_version
from storage.examples import examples_file, map_examples, read_blocks, skipped_rows, whole, write_examples
from storage.heldout import split_origin
from storage.pairs_io import corpus_fingerprint
from tasks.keys import cache_key
from tasks.results import SERIALIZER, json_only, results_beside, verified

log = logging.getLogger(__name__)
CODE_VERSION = code_version(consistency, encode)
MINE_CHUNK = 1_000_000
"""Pairs per exact search, as the filter's default chunk."""
ENCODE_BLOCK = 10_000
"""Pairs read and encoded at a time (a divisor of :data:`MINE_CHUNK`: a chunk is whole blocks)."""


def _identity(p: dict) -> str:
    """What a mined file is made of (source, model, lengths, rule, code, the data root whose split
    it follows): its cache key, and the fingerprint written into it, so a file mined since for
    other settings is not taken."""
    return cache_key("mine", corpus_fingerprint(p["pairs_source"]), model_fingerprint(resolve_model(p["model"])),
                     p["query_column"], p["document_column"], str(p["negatives"]), str(tuple(p["lengths"])),
                     CODE_VERSION, str(Path(p["out_path"]).resolve()), json.dumps(p.get("prompts"), sort_keys=True),
                     (p.get("rule") or consistency.DEFAULT_RULE).model_dump_json(),
                     f"split of {split_origin(p['pairs_source'])}")


@json_only
def _mine_key(context: TaskRunContext, p: dict) -> str:
    return _identity(p)


def _mined_output(p: dict) -> tuple[Path | None, bool]:
    # A source carrying its own negatives writes no file: the task then runs again, which costs a
    # look at its (cached) examples file.
    return results_beside(p["out_path"]), whole(Path(p["out_path"]), fingerprint=_identity(p))


@verified(_mined_output)
@task(name="hard-negatives", cache_key_fn=_mine_key, persist_result=True, result_serializer=SERIALIZER, retries=0)
def with_hard_negatives(pairs_source: str, model: str, query_column: str, document_column: str, negatives: int,
                        lengths: tuple[int, int], out_path: str, examples_dir: str, prompts: dict | None = None,
                        rule: NegativeRule = consistency.DEFAULT_RULE) -> str:
    """The pairs source a stage reads: ``pairs_source`` itself when it carries hard negatives
    (a filtered data root, or a file with negative columns), else ``out_path``, an examples file
    (``.arrow``, :mod:`storage.examples`) written here: its pairs with up to ``negatives`` hard
    negatives each, as row numbers of their documents, found by ``model`` as the consistency
    filter finds them, reading queries and documents cut at the stage's ``lengths`` (query,
    document), with its ``prompts`` (None: what ``model`` declares) — as the stage will read them;
    ``rule``: which documents may be negatives (the counts of those it kept out are logged).
    A pairs file is read through its examples file in ``examples_dir``.

    Memory: the texts of :data:`ENCODE_BLOCK` pairs, and per chunk of :data:`MINE_CHUNK` pairs the
    search's (:func:`~mosaic_core.data.consistency.consistency_filter`); the chunk's embeddings are
    float32 files beside ``out_path``, removed when done."""
    source = examples_file(pairs_source, query_column, document_column, Path(examples_dir))
    table = map_examples(source)
    if PairSet(table).has_negatives:
        return pairs_source
    enc = Encoder.load(model, normalize=True, prompts=prompts)
    log.info("mining hard negatives for %d pairs of %s with %s: queries at %d tokens, documents at %d", table.num_rows,
             pairs_source, model, *lengths)
    out, work = Path(out_path), Path(out_path).with_suffix(".embeddings")
    work.mkdir(parents=True, exist_ok=True)
    try:
        with tqdm(total=table.num_rows, desc="mine", unit="pair") as bar:
            rejected: Counter = Counter()
            identity = _identity({"pairs_source": pairs_source, "model": model, "query_column": query_column,
                                  "document_column": document_column, "negatives": negatives, "lengths": lengths,
                                  "out_path": out_path, "prompts": prompts, "rule": rule})
            mined = _mined(source, table.num_rows, enc, lengths, negatives, work, bar, rule, rejected)
            rows = write_examples(out, mined, skipped_rows(source), identity, split_of=split_origin(pairs_source))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    found = PairSet(map_examples(out)).negatives_per_pair()
    log.info("mined %.2f hard negatives per pair for %d pairs of %s with %s; left out %d candidates scoring within "
             "%.0f%% of the positive and %d near duplicates of it", found, rows, pairs_source, model,
             rejected["near_positive"], 100 * rule.margin, rejected["near_duplicate"])
    return out_path


def _mined(source: Path, n: int, enc: Encoder, lengths: tuple[int, int], negatives: int, work: Path,
           bar: tqdm, rule: NegativeRule, rejected: Counter) -> Iterator[pa.RecordBatch]:
    """The ``n`` rows of the examples file ``source`` with their mined negatives (row numbers of
    the same rows), chunk by chunk: the chunk's blocks encoded into float32 files in ``work``,
    searched, then read again and written with their negatives."""
    reading, writing = read_blocks(source, ENCODE_BLOCK), read_blocks(source, ENCODE_BLOCK)
    dim = enc.model.config.hidden_size
    for lo in range(0, n, MINE_CHUNK):
        size = min(MINE_CHUNK, n - lo)
        q = np.lib.format.open_memmap(work / "queries.npy", mode="w+", dtype=np.float32, shape=(size, dim))
        d = np.lib.format.open_memmap(work / "documents.npy", mode="w+", dtype=np.float32, shape=(size, dim))
        keys = np.empty(size, dtype=np.uint64)  # content hashes: a copy of a document is one document
        for at in range(0, size, ENCODE_BLOCK):
            block = next(reading)
            queries, docs = block.column("query").to_pylist(), block.column("document").to_pylist()
            q[at:at + len(queries)] = enc.with_max_length(lengths[0]).encode(queries, kind="query")
            d[at:at + len(docs)] = enc.with_max_length(lengths[1]).encode(docs, kind="document")
            keys[at:at + len(docs)] = text_hashes(docs)
            bar.update(len(docs))
        res = consistency.consistency_filter(q, d, k=1, doc_keys=keys.tolist(), negatives=negatives, rule=rule)
        rejected.update(res.rejected)
        del q, d
        for at in range(0, size, ENCODE_BLOCK):
            block = next(writing)
            refs = pa.array([[lo + j for j in negs] for negs in res.negatives[at:at + block.num_rows]],
                            pa.list_(pa.int64()))
            yield from block.set_column(2, "negatives", refs).to_batches()
