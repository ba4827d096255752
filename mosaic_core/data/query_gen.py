"""Generated queries (doc2query, Nogueira et al. 2019): a seq2seq model writes queries for each
passage by sampling, reproducibly, and a cross-encoder may score each (query, passage) pair and
drop the poor ones (GPL, Wang et al. 2022); the same cross-encoder's margins between a pair and
its hard negatives are MarginMSE's labels (:func:`teacher_margins`). The model-free builders are
:mod:`mosaic_core.data.documents`'s.

Models are loaded from what ``from_pretrained`` accepts (a hub id, a local folder): a config's
reference is resolved by the caller with :func:`mosaic_core.modeling.refs.resolve_model`
(``offline:`` aliases, relative folders), since ``data`` sits beside ``modeling`` and does not
import it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from mosaic_core.config_documents import DocumentsConfig
from mosaic_core.data.documents import BuildStats, Pair, Passage
from mosaic_core.data.own_pairs import normalise

TOP_P = 0.95
"""Nucleus sampling's mass, as doc2query's models were sampled."""
INPUT_MAX_TOKENS = 384
"""A passage is cut after this many tokens before generation (doc2query's T5 models read 384)."""
PAIR_MAX_TOKENS = 512
"""A (query, passage) pair is cut after this many tokens before the cross-encoder reads it."""


class UnusableModel(ValueError):
    """A generator or cross-encoder that cannot be loaded or used; the message says what to pass."""


@dataclass
class Loaded:
    """A model in eval mode on its device, with its tokenizer."""

    model: torch.nn.Module
    tokenizer: object
    device: torch.device


def _load(ref: str, what: str, auto_class: type, device: str, dtype: torch.dtype | None) -> Loaded:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(ref)
        model = auto_class.from_pretrained(ref, **({"dtype": dtype} if dtype is not None else {}))
    except (OSError, ValueError) as exc:
        raise UnusableModel(f"{what} {ref!r} cannot be loaded ({str(exc).strip().splitlines()[0][:200]}): pass a "
                            "local model folder, or a hub id that is reachable or in the local Hugging Face "
                            "cache") from exc
    target = torch.device(device)
    return Loaded(model.to(target).eval(), tokenizer, target)


def load_generator(ref: str, device: str = "cpu", dtype: torch.dtype | None = None) -> Loaded:
    """A seq2seq query generator (``AutoModelForSeq2SeqLM``; a hub id such as
    doc2query/msmarco-t5-base-v1, or a local folder) and its tokenizer, on ``device``."""
    from transformers import AutoModelForSeq2SeqLM

    return _load(ref, "generator", AutoModelForSeq2SeqLM, device, dtype)


def load_cross_encoder(ref: str, device: str = "cpu", dtype: torch.dtype | None = None) -> Loaded:
    """A cross-encoder (``AutoModelForSequenceClassification`` with one label: one relevance score
    per pair; a hub id such as cross-encoder/ms-marco-MiniLM-L-6-v2, or a local folder) and its
    tokenizer, on ``device``."""
    from transformers import AutoModelForSequenceClassification

    loaded = _load(ref, "cross_encoder", AutoModelForSequenceClassification, device, dtype)
    if loaded.model.config.num_labels != 1:
        raise UnusableModel(f"cross_encoder {ref!r} has {loaded.model.config.num_labels} labels; a cross-encoder "
                            "scoring relevance has one (e.g. cross-encoder/ms-marco-MiniLM-L-6-v2)")
    return loaded


def batch_seed(seed: int, keys: list[str]) -> int:
    """The seed of one generation batch: of the config's seed and the batch's passages, so a batch
    samples the same queries whenever it holds the same passages."""
    digest = hashlib.sha256("\0".join([str(seed), *keys]).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@torch.no_grad()
def generate_queries(generator: Loaded, texts: list[str], n: int, seed: int, max_new_tokens: int = 64,
                     top_p: float = TOP_P) -> list[list[str]]:
    """``n`` sampled queries per text (``len(texts)`` lists, each of ``n`` decoded strings,
    whitespace normalised, possibly empty or repeated). The sampling is seeded by ``seed`` in a
    forked RNG, so the same texts, seed and model give the same queries and the caller's RNG
    state is left as it was."""
    if not texts:
        return []
    enc = generator.tokenizer(texts, padding=True, truncation=True, max_length=INPUT_MAX_TOKENS, return_tensors="pt")
    enc = {k: v.to(generator.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
    cuda = [generator.device.index or 0] if generator.device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        out = generator.model.generate(**enc, do_sample=True, top_p=top_p, max_new_tokens=max_new_tokens,
                                       num_return_sequences=n)  # (len(texts) * n, length), text-major
    decoded = [normalise(q) for q in generator.tokenizer.batch_decode(out, skip_special_tokens=True)]
    return [decoded[i * n:(i + 1) * n] for i in range(len(texts))]


@torch.no_grad()
def score_pairs(cross_encoder: Loaded, queries: list[str], documents: list[str], batch_size: int = 32) -> list[float]:
    """The cross-encoder's score (its one logit) of each (query, document) pair, in order. Pairs
    are batched longest first, so a batch pads to little more than its own pairs' length."""
    order = sorted(range(len(queries)), key=lambda i: -(len(queries[i]) + len(documents[i])))
    scores = [0.0] * len(queries)
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        enc = cross_encoder.tokenizer([queries[i] for i in batch], [documents[i] for i in batch], padding=True,
                                      truncation=True, max_length=PAIR_MAX_TOKENS, return_tensors="pt")
        logits = cross_encoder.model(**enc.to(cross_encoder.device)).logits  # (batch, 1)
        for i, score in zip(batch, logits[:, 0].float().cpu().tolist(), strict=True):
            scores[i] = score
    return scores


def teacher_margins(cross_encoder: Loaded, queries: list[str], documents: list[str], negatives: list[list[str]],
                    batch_size: int = 32) -> list[list[float]]:
    """MarginMSE's labels (GPL's pseudo-labels): for each query, the cross-encoder's score of
    (query, its document) minus its score of (query, negative) for each of its ``negatives``, in
    their order. One scoring pass over every pair of the call."""
    firsts = [q for q, negs in zip(queries, negatives, strict=True) for _ in negs]
    seconds = [n for negs in negatives for n in negs]
    scores = score_pairs(cross_encoder, queries + firsts, documents + seconds, batch_size)
    positive, rest = scores[:len(queries)], iter(scores[len(queries):])
    return [[positive[i] - next(rest) for _ in negs] for i, negs in enumerate(negatives)]


def _distinct(queries: list[str], stats: BuildStats) -> list[str]:
    """The non-empty queries, first of each (case-insensitive) kind; the rest counted."""
    kept, seen = [], set()
    for q in queries:
        key = q.casefold()
        if not q:
            stats.skipped["generated"]["empty"] += 1
        elif key in seen:
            stats.skipped["generated"]["duplicate"] += 1
        else:
            seen.add(key)
            kept.append(q)
    return kept


def _batches(passages: Iterable[Passage], size: int) -> Iterator[list[Passage]]:
    batch: list[Passage] = []
    for p in passages:
        batch.append(p)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def generated_pairs(passages: Iterable[Passage], cfg: DocumentsConfig, generator: Loaded, stats: BuildStats,
                    cross_encoder: Loaded | None = None, progress: bool = True) -> Iterator[Pair]:
    """(query, passage) pairs of ``cfg.queries_per_passage`` generated queries per passage (empty
    and repeated ones dropped), ``cfg.batch_size`` passages per batch; with a ``cross_encoder``
    each pair carries its score, and pairs under ``cfg.min_cross_encoder_score`` are dropped
    (``low_score``). Streamed, batch by batch; the same passages in the same batches give the
    same pairs."""
    total = len(passages) if hasattr(passages, "__len__") else None
    bar = tqdm(total=total, desc="generating queries", unit=" passages", disable=not progress or None,
               dynamic_ncols=True)
    for batch in _batches(passages, cfg.batch_size):
        seed = batch_seed(cfg.seed, [f"{p.doc_id}\0{p.index}" for p in batch])
        texts = [p.text for p in batch]
        generated = generate_queries(generator, texts, cfg.queries_per_passage, seed, cfg.generator_max_new_tokens)
        pairs = [Pair(q, p.text, "generated", p.doc_id) for p, qs in zip(batch, generated, strict=True)
                 for q in _distinct(qs, stats)]
        if cross_encoder is not None and pairs:
            scores = score_pairs(cross_encoder, [p.query for p in pairs], [p.document for p in pairs], cfg.batch_size)
            pairs = [p._replace(score=s) for p, s in zip(pairs, scores, strict=True)]
            if cfg.min_cross_encoder_score is not None:
                kept = [p for p in pairs if p.score >= cfg.min_cross_encoder_score]
                stats.skipped["generated"]["low_score"] += len(pairs) - len(kept)
                pairs = kept
        stats.made["generated"] += len(pairs)
        bar.update(len(batch))
        yield from pairs
    bar.close()
