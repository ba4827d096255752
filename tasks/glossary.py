"""Prefect tasks of a run's glossary: read it (downloaded into the data root first when it is a
URL) and write the files the run's steps read (``storage.glossary``); describe what the run
taught its terms, for the run report."""

from __future__ import annotations

import json
import logging
from itertools import islice

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from mosaic_core.config import GlossaryConfig, VocabConfig
from mosaic_core.evaluate import diagnose
from mosaic_core.evaluate.diagnose import diagnose_terms, terms_sentences
from mosaic_core.modeling.fingerprint import model_fingerprint
from mosaic_core.modeling.refs import resolve_model
from mosaic_core.versioning import code_version
from mosaic_core.vocab.sample import bottom_k
from storage.glossary import written_glossary
from storage.pairs_io import corpus_fingerprint, iter_corpus_texts
from tasks.glossary_file import glossary_identity, write_glossary
from tasks.ingest import is_transient
from tasks.keys import cache_key
from tasks.results import SERIALIZER, json_only

log = logging.getLogger(__name__)


@task(name="glossary", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=[5, 30, 120],
      retry_condition_fn=is_transient)
def prepare_glossary(cfg: GlossaryConfig, data_root: str, vocab: VocabConfig) -> dict:
    """The glossary's record (``storage.glossary.write_glossary``): taken from the data root while
    its files are whole and were made from the same glossary file, settings, code and corpus;
    written again otherwise, keeping (``cfg.used_only``) the entries that stage 1's sample of the
    data root's pairs names. A download that broke off is retried."""
    identity = glossary_identity(cfg, data_root, corpus_fingerprint(data_root) if cfg.used_only else None)
    record = written_glossary(data_root, identity)
    if record is not None:
        log.info("glossary: %d entries, unchanged since they were written", record["entries"])
        return record
    sample = bottom_k(iter_corpus_texts(data_root, vocab.text_columns), vocab.sample_texts) if cfg.used_only else None
    return write_glossary(cfg, data_root, identity, sample.texts if sample else None)


SHOWN = 12
"""Glossary terms the run report describes: the added ones the corpus uses most."""
SENTENCE_TEXTS = 20_000
"""Corpus texts searched for sentences that use the terms shown (the first ones: bounded, whatever the corpus)."""


@json_only
def _terms_cache_key(context: TaskRunContext, p: dict) -> str:
    return cache_key("terms", json.dumps(p["added"], sort_keys=True), model_fingerprint(resolve_model(p["before"])),
                     model_fingerprint(resolve_model(p["after"])), corpus_fingerprint(p["corpus"]),
                     ",".join(p["columns"]), model_fingerprint(resolve_model(p["base_model"])), code_version(diagnose))


@task(name="glossary-terms", cache_key_fn=_terms_cache_key, persist_result=True, result_serializer=SERIALIZER,
      retries=0)
def describe_terms(added: list[dict], before: str, after: str, corpus: str, columns: tuple[str, ...],
                   base_model: str) -> list[dict]:
    """What the run taught the glossary terms stage 1 added (``added``: the vocab report's, most
    used first, :data:`SHOWN` of them): their pieces in the base and the adapted tokenizer, the
    MLM rank the model gives each where it occurs in the corpus (median over up to three
    sentences, 1 = its top prediction) before the glossary's stages (``before``: the model that
    entered the dictionary stage) and after them (``after``: the adapted model), and its nearest
    neighbours in the adapted model's embedding matrix. Cached by the models' and the corpus's
    fingerprints: a rerun that trains nothing does not load the models again."""
    shown = [a["term"] for a in sorted(added, key=lambda a: (-a["uses"], a["term"]))[:SHOWN]]
    if not shown:
        return []
    sentences = terms_sentences(islice(iter_corpus_texts(corpus, columns), SENTENCE_TEXTS), shown, 3)
    then = diagnose_terms(before, sentences, neighbours=5)
    now = diagnose_terms(after, sentences, base_model=base_model, neighbours=5)
    return [{"term": n.term, "base_pieces": n.base_pieces, "pieces": n.pieces, "rank_before": b.median_rank,
             "rank_after": n.median_rank, "neighbours": [t for t, _ in n.neighbours]}
            for b, n in zip(then, now, strict=True)]
