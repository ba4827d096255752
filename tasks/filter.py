"""Prefect tasks of the filter stage: encode one partition (cached embeddings), filter one chunk."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import Counter
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import numpy as np
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from mosaic_core.config import FilterConfig
from mosaic_core.data import consistency
from mosaic_core import export
from mosaic_core.modeling import encode
from mosaic_core.modeling.fingerprint import model_fingerprint
from mosaic_core.modeling.prompts import resolve_prompts
from mosaic_core.modeling.refs import resolve_model
from mosaic_core.trainer.heldout import content_hashes
from mosaic_core.versioning import code_version
from storage import schemas
from storage.catalog import Catalog
from storage.embeddings import embeddings_path, load_embeddings, save_embeddings, stored_rows
from storage.layout import DataLayout
from storage.manifest import Manifest, outputs_whole, read_manifest, write_manifest
from storage.pairs_io import CorpusError, PairPartition, list_pair_partitions, read_pair_partition
from storage.parquet import write_partition
from tasks.keys import cache_key
from tasks.results import SERIALIZER, json_only, verified

log = logging.getLogger(__name__)
STAGE = "filter"
ENCODE_VERSION = code_version(encode)
EXPORT_VERSION = code_version(export)
FILTER_VERSION = code_version(consistency)


@dataclasses.dataclass(frozen=True)
class EncodedPartition:
    """Where a partition's embeddings are, and how many good and bad rows it had."""

    partition: PairPartition
    path: str
    rows: int
    bad: dict[str, int]


_LOAD_LOCK = threading.Lock()


def _encoder(model: str, precision: str, batch_tokens: int | None, prompts: object | None,
             backend: str = "torch", root: str | None = None) -> encode.Encoder:
    """One loaded model per worker process, reused by every partition it encodes. Loads are
    serialised: transformers' from_pretrained patches torch.nn.init process-wide while it
    loads, and two loads in threads can leave it patched; and an ONNX ``backend`` exports the
    model once, into ``root``'s cache, before the first partition encodes."""
    if backend != "torch":
        export.require_extra(backend)  # before any work: the error names the install command
    with _LOAD_LOCK:
        if backend == "torch":
            return _load_encoder(model, precision, batch_tokens, prompts)
        if root is None:
            raise ValueError(f"backend {backend!r} needs the data root (its cache/onnx holds the export)")
        return _load_exported(model, backend, batch_tokens, prompts, str(DataLayout(root).onnx_cache_dir))


@lru_cache(maxsize=1)
def _load_encoder(model: str, precision: str, batch_tokens: int | None, prompts: object | None) -> encode.Encoder:
    return encode.Encoder.load(model, normalize=True, precision=precision, batch_tokens=batch_tokens,  # cosine
                               prompts=prompts)


@lru_cache(maxsize=1)
def _load_exported(model: str, backend: str, batch_tokens: int | None, prompts: object | None,
                   cache_dir: str) -> encode.Encoder:
    folder = export.cached_export(model, backend, cache_dir)
    return export.exported_encoder(folder, normalize=True, batch_tokens=batch_tokens,  # cosine
                                   prompts=resolve_prompts(resolve_model(model), prompts))  # as Encoder.load


@task(name="list-pair-partitions", cache_policy=NO_CACHE)
def list_partitions(source: str, cfg: FilterConfig) -> list[PairPartition]:
    return list_pair_partitions(source, cfg.query_column, cfg.document_column)


def _encoder_version(cfg: FilterConfig) -> str:
    """What an embedding depends on besides its text and ``cfg.encoding_hash()``: the model's
    weights and the encoding code (the export's too, for an exported backend)."""
    return cache_key("encoder", model_fingerprint(resolve_model(cfg.model)), ENCODE_VERSION,
                     *((EXPORT_VERSION,) if cfg.backend != "torch" else ()))


@json_only
def _encode_key(context: TaskRunContext, p: dict) -> str:
    cfg: FilterConfig = p["cfg"]
    return cache_key("encode", p["part"].checksum, cfg.encoding_hash(),
                               model_fingerprint(resolve_model(cfg.model)), ENCODE_VERSION,
                               *((EXPORT_VERSION,) if cfg.backend != "torch" else ()),
                               str(DataLayout(p["root"]).root))


def _encode_output(p: dict) -> tuple[Path, bool]:
    layout = DataLayout(p["root"])
    return layout.results_dir, embeddings_path(layout, p["cfg"].encoding_hash(), p["part"].name).exists()


@verified(_encode_output)
@task(name="encode-partition", cache_key_fn=_encode_key, persist_result=True, result_serializer=SERIALIZER,
      retries=0, task_run_name="encode-{part.name}")
def encode_partition(part: PairPartition, cfg: FilterConfig, root: str) -> EncodedPartition:
    """Embed a partition's queries and documents; store them (float16) for every later filter.
    A partition that changed (an update revised or deleted some of its pairs) takes the
    embeddings of its pairs whose content is unchanged from its stored file, by content hash,
    when the same encoder made it: only new and revised pairs are encoded (none: no model loads)."""
    rows = read_pair_partition(part, cfg.query_column, cfg.document_column)
    hashes, made_with = content_hashes(rows.queries, rows.documents), _encoder_version(cfg)
    path = embeddings_path(DataLayout(root), cfg.encoding_hash(), part.name)
    found, stored_queries, stored_docs = stored_rows(path, hashes, made_with)
    new = np.flatnonzero(found < 0)
    if len(new) == len(found):  # nothing stored: every text encoded, exactly as always
        queries, docs = _encode(cfg, root, rows.queries, rows.documents)
    else:
        queries, docs = _encode(cfg, root, [rows.queries[i] for i in new], [rows.documents[i] for i in new]) \
            if len(new) else (None, None)
        queries, docs = _merged(found, stored_queries, queries), _merged(found, stored_docs, docs)
    save_embeddings(path, queries, docs, hashes, made_with)
    log.info("%s: encoded %d pairs, %d reused (%s bad rows)", part.name, len(new), len(found) - len(new),
             sum(rows.bad.values()))
    return EncodedPartition(part, str(path), len(rows.queries), rows.bad)


def _encode(cfg: FilterConfig, root: str, queries: list[str], documents: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(query, document) embeddings of these texts, with the model loaded once per process."""
    enc = _encoder(cfg.model, cfg.precision, cfg.batch_tokens, cfg.prompts, cfg.backend, root)
    return (enc.with_max_length(cfg.query_max_length).encode(queries, cfg.batch_size, kind="query"),
            enc.with_max_length(cfg.document_max_length).encode(documents, cfg.batch_size, kind="document"))


def _merged(found: np.ndarray, stored: np.ndarray, new: np.ndarray | None) -> np.ndarray:
    """``[len(found), dim]``: row i is ``stored[found[i]]`` where that is >= 0, else the next row
    of ``new`` (None: every row is stored)."""
    out = np.empty((len(found), stored.shape[1]), np.float32)
    out[found >= 0] = stored[found[found >= 0]]
    if new is not None:
        out[found < 0] = new
    return out


@json_only
def _filter_key(context: TaskRunContext, p: dict) -> str:
    return cache_key("filter", *(e.partition.checksum for e in p["encoded"]), p["cfg"].config_hash(),
                               FILTER_VERSION, str(DataLayout(p["root"]).root))


def _filter_output(p: dict) -> tuple[Path, bool]:
    layout = DataLayout(p["root"])
    manifests = [read_manifest(layout, STAGE, e.partition.name) for e in p["encoded"]]
    return layout.results_dir, all(m is not None and outputs_whole(m) for m in manifests)


@verified(_filter_output)
@task(name="filter-chunk", cache_key_fn=_filter_key, persist_result=True, result_serializer=SERIALIZER,
      retries=0, task_run_name="filter-chunk-{chunk}")
def filter_chunk(chunk: int, encoded: list[EncodedPartition], cfg: FilterConfig, root: str) -> list[Manifest]:
    """Filter the pairs of a chunk of partitions together (one FAISS index per ``chunk_size``
    rows) and write one ``filtered`` partition and manifest per source partition."""
    layout, started = DataLayout(root), datetime.now(timezone.utc)
    rows = [read_pair_partition(e.partition, cfg.query_column, cfg.document_column) for e in encoded]
    embs = [load_embeddings(Path(e.path)) for e in encoded]
    q = np.concatenate([m[0] for m in embs]) if embs else np.zeros((0, 1), np.float32)
    d = np.concatenate([m[1] for m in embs]) if embs else np.zeros((0, 1), np.float32)
    docs = [t for r in rows for t in r.documents]
    refs = [{"source_file": e.partition.name, "pair_id": pid} for e, r in zip(encoded, rows, strict=True)
            for pid in r.pair_ids]
    kept, rank, cosine = (np.zeros(len(docs), bool), np.zeros(len(docs), np.int32), np.zeros(len(docs), np.float32))
    negatives: list[list[dict]] = [[] for _ in docs]
    rejected: Counter = Counter()
    for lo in range(0, len(docs), cfg.chunk_size):
        hi = min(lo + cfg.chunk_size, len(docs))
        if cfg.mode == "threshold":
            res = consistency.threshold_filter(q[lo:hi], d[lo:hi], cfg.threshold)
        else:
            res = consistency.consistency_filter(q[lo:hi], d[lo:hi], cfg.k, doc_keys=docs[lo:hi],
                                                 negatives=cfg.hard_negatives, rule=cfg.negative_rule)
            rejected.update(res.rejected)
        kept[lo:hi], rank[lo:hi], cosine[lo:hi] = res.kept, res.rank, res.cosine
        for i, found in enumerate(res.negatives or []):
            negatives[lo + i] = [refs[lo + j] for j in found]
    manifests, offset = [], 0
    for e, r in zip(encoded, rows, strict=True):
        n = len(r.queries)
        sl = slice(offset, offset + n)
        offset += n
        out = layout.partition_path("filtered", e.partition.name)
        write_partition(out, schemas.FILTERED, [[
            {"pair_id": pid, "source_file": e.partition.name, "query": qt, "document": dt, "kept": bool(k),
             "rank": int(rk), "cosine": float(c), "chunk": chunk, "negatives": negs}
            for pid, qt, dt, k, rk, c, negs in zip(r.pair_ids, r.queries, r.documents, kept[sl], rank[sl], cosine[sl],
                                                  negatives[sl], strict=True)]])
        n_kept = int(kept[sl].sum())
        dropped = Counter({"inconsistent" if cfg.mode == "consistency" else "below_threshold": n - n_kept})
        dropped.update(r.bad)
        manifest = Manifest(
            stage=STAGE, partition=e.partition.name, source=e.partition.source, source_md5=e.partition.checksum,
            file_seq=-1, chunk=chunk, config_hash=cfg.config_hash(), code_version=FILTER_VERSION, status="complete",
            records_in=n + sum(r.bad.values()), rows_out=n, kept=n_kept, dropped=dict(dropped),
            outputs=[str(out), e.path], started_at=started)
        write_manifest(layout, manifest)
        manifests.append(manifest)
    log.info("chunk %d: %d pairs, %d kept (%.1f%%); %d hard negatives%s", chunk, len(docs), int(kept.sum()),
             100 * kept.mean() if len(docs) else 0, sum(map(len, negatives)), _rejected(rejected))
    if not kept.any() and encoded:
        require_pairs_left(layout, cfg, encoded[0].partition.source)
    return manifests


def require_pairs_left(layout: DataLayout, cfg: FilterConfig, source: str) -> None:
    """A :class:`CorpusError` when the filters left no pair of ``source`` at all: every partition
    of it has its filter manifest for these inputs and none kept a pair. A chunk that kept nothing
    calls this once its manifests are written; while a partition of another chunk has none yet,
    that chunk decides when it finishes (a chunk that raises is not cached, so a rerun asks again)."""
    parts = list_pair_partitions(source, cfg.query_column, cfg.document_column)
    manifests = [read_manifest(layout, STAGE, p.name) for p in parts]
    if not parts or any(m is None or m.config_hash != cfg.config_hash() or m.source_md5 != p.checksum or m.kept
                        for p, m in zip(parts, manifests, strict=True)):
        return
    dropped: Counter[str] = Counter()
    for m in manifests:
        dropped.update({k: v for k, v in m.dropped.items() if v})
    reasons = ", ".join(f"{k}: {v:,}" for k, v in dropped.most_common()) or "no rows at all"
    lower = (f"lower --threshold (now {cfg.threshold})" if cfg.mode == "threshold"
             else f"raise --k (now {cfg.k}: a pair is kept iff its document is in its query's top k)")
    raise CorpusError(
        f"no pairs left after the filters: {source} had {sum(m.records_in for m in manifests):,} rows in "
        f"{len(parts)} partition(s) and every one was dropped ({reasons}). Loosen the filter ({lower}), or check "
        f"the input: are --query-column/--document-column ({cfg.query_column}/{cfg.document_column}) the right "
        "columns, and does each document belong to its query?")


@task(name="score-report", cache_policy=NO_CACHE)
def score_report(root: str, bins: int = 20) -> str:
    """Markdown: the distribution of cosine(query, document) over all filtered pairs, with the
    share kept at each threshold, so a user can choose one for threshold mode."""
    with Catalog(DataLayout(root), read_only=True) as cat:
        cosine = cat.cosines()
    if not len(cosine):
        return "no filtered pairs yet"
    lines = ["| cosine | pairs | kept if threshold = low |", "| --- | ---: | ---: |"]
    for lo, hi, count in consistency.score_histogram(cosine, bins):
        if count:
            lines.append(f"| {lo:+.1f} … {hi:+.1f} | {count:,} | {(cosine >= lo).mean():.1%} |")
    quantiles = np.quantile(cosine, [0.1, 0.25, 0.5, 0.75, 0.9])
    return ("cosine(query, document): " + ", ".join(f"p{int(p * 100)}={v:.3f}" for p, v in
                                                    zip((0.1, 0.25, 0.5, 0.75, 0.9), quantiles, strict=True))
            + "\n\n" + "\n".join(lines))


@task(name="dropped-examples", cache_policy=NO_CACHE)
def dropped_examples(root: str, n: int = 5) -> list[tuple]:
    """(pair id, cosine, query, document) of the ``n`` dropped pairs that came closest to being kept."""
    with Catalog(DataLayout(root), read_only=True) as cat:
        return cat.dropped_examples(n)


def _rejected(counts: Counter) -> str:
    """What the negative rule kept out of the plain rule's picks, for a log line."""
    if not sum(counts.values()):
        return ""
    return (f" ({counts['near_positive']:,} candidates scoring within the margin of the positive and "
            f"{counts['near_duplicate']:,} near duplicates of it left out)")
