"""Prefect task: hard negatives for a pairs file that has none, mined with the consistency
filter's own search (:func:`mosaic_core.data.consistency.consistency_filter`)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from prefect import task
from prefect.context import TaskRunContext

from mosaic_core.data import consistency
from mosaic_core.modeling import encode
from mosaic_core.modeling.encode import Encoder
from mosaic_core.modeling.fingerprint import model_fingerprint
from mosaic_core.modeling.refs import resolve_model
from mosaic_core.versioning import code_version
from storage.pairs_io import corpus_fingerprint, read_examples, write_jsonl
from tasks.keys import cache_key
from tasks.results import SERIALIZER, json_only

log = logging.getLogger(__name__)
CODE_VERSION = code_version(consistency, encode)
MINE_CHUNK = 1_000_000
"""Pairs per exact search, as the filter's default chunk."""


@json_only
def _mine_key(context: TaskRunContext, p: dict) -> str:
    return cache_key("mine", corpus_fingerprint(p["pairs_source"]), model_fingerprint(resolve_model(p["model"])),
                     p["query_column"], p["document_column"], str(p["negatives"]), str(p["lengths"]), CODE_VERSION,
                     str(Path(p["out_path"]).resolve()), json.dumps(p.get("prompts"), sort_keys=True))


@task(name="hard-negatives", cache_key_fn=_mine_key, persist_result=True, result_serializer=SERIALIZER, retries=0)
def with_hard_negatives(pairs_source: str, model: str, query_column: str, document_column: str, negatives: int,
                        lengths: tuple[int, int], out_path: str, prompts: dict | None = None) -> str:
    """The pairs source a stage reads: ``pairs_source`` itself when it carries hard negatives
    (a filtered data root, or a file with negative columns), else ``out_path``, written here:
    its pairs with up to ``negatives`` hard negatives each (``negatives`` column), found by
    ``model`` as the consistency filter finds them, reading queries and documents cut at the
    stage's ``lengths`` (query, document), with its ``prompts`` (None: what ``model`` declares)
    — as the stage will read them."""
    rows, _ = read_examples(pairs_source, query_column, document_column)
    if any(len(r) > 2 for r in rows):
        return pairs_source
    queries, docs = [r[0] for r in rows], [r[1] for r in rows]
    enc = Encoder.load(model, normalize=True, prompts=prompts)
    log.info("mining hard negatives for %d pairs of %s with %s: encoding the queries (%d tokens) and documents "
             "(%d tokens)", len(rows), pairs_source, model, *lengths)
    t0 = time.perf_counter()
    q = enc.with_max_length(lengths[0]).encode(queries, progress=True, kind="query")
    log.info("mining: queries encoded in %.0f s; encoding the documents", time.perf_counter() - t0)
    d = enc.with_max_length(lengths[1]).encode(docs, progress=True, kind="document")
    log.info("mining: documents encoded in %.0f s; searching", time.perf_counter() - t0)
    out, found = [], 0
    for lo in range(0, len(rows), MINE_CHUNK):
        hi = min(lo + MINE_CHUNK, len(rows))
        res = consistency.consistency_filter(q[lo:hi], d[lo:hi], k=1, doc_keys=docs[lo:hi], negatives=negatives)
        for i, negs in enumerate(res.negatives):
            out.append({query_column: queries[lo + i], document_column: docs[lo + i],
                        "negatives": [docs[lo + j] for j in negs]})
            found += len(negs)
    write_jsonl(Path(out_path), out)
    log.info("mined %d hard negatives for %d pairs of %s with %s (%.2f per pair)", found, len(out), pairs_source,
             model, found / max(len(out), 1))
    return out_path
