"""Prefect task of stage 1: domain tokenizer + vocabulary expansion."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

from prefect import task
from prefect.context import TaskRunContext
from tqdm.auto import tqdm

from mosaic_core.config import GlossaryConfig, VocabConfig
from mosaic_core.modeling.fingerprint import model_fingerprint
from mosaic_core.modeling.modeldir import has_domain_ids, is_whole_model
from mosaic_core.modeling.refs import resolve_model
from mosaic_core.versioning import code_version
from mosaic_core.vocab import build as vocab
from mosaic_core.vocab.define import GlossaryTerms, RowBudget
from mosaic_core.vocab.sample import bottom_k
from tasks.glossary_file import read_entries
from storage.pairs_io import corpus_fingerprint, iter_corpus_texts
from tasks.keys import cache_key
from tasks.results import SERIALIZER, json_only, results_beside, verified

log = logging.getLogger(__name__)
CODE_VERSION = code_version(vocab)  # and all it imports (mosaic_core/versioning.py)


@json_only
def _vocab_cache_key(context: TaskRunContext, parameters: dict) -> str:
    cfg: VocabConfig = parameters["cfg"]
    glossary: GlossaryConfig | None = parameters.get("glossary")
    terms = [corpus_fingerprint(parameters["entries"]), str(glossary.min_count), str(glossary.define_steps),
             *([json.dumps(parameters["budget"], sort_keys=True)] if parameters.get("budget") else [])] \
        if glossary is not None else []
    return cache_key(
        "vocab",
        model_fingerprint(resolve_model(cfg.base_model)),
        corpus_fingerprint(parameters["corpus"]),
        corpus_fingerprint(cfg.reduce_to_corpus) if cfg.reduce_to_corpus else "",
        cfg.config_hash(),
        CODE_VERSION,
        str(Path(parameters["out_dir"]).resolve()),
        *terms,
    )


def _vocab_output(p: dict) -> tuple[Path | None, bool]:
    return results_beside(p["out_dir"]), has_domain_ids(p["out_dir"]) and is_whole_model(p["out_dir"])


@verified(_vocab_output)
@task(name="vocab-expansion", cache_key_fn=_vocab_cache_key, persist_result=True, result_serializer=SERIALIZER,
      retries=0)
def expand_vocabulary(corpus: str, cfg: VocabConfig, out_dir: str, glossary: GlossaryConfig | None = None,
                      entries: str | None = None, budget: dict | None = None) -> dict:
    """Train the domain tokenizer on ``corpus`` and write the expanded model to ``out_dir``;
    returns the report as a dict (small: a manifest, never the model). With a ``glossary``, its
    entries (the file ``entries``, as ``storage.glossary`` writes it) are stage 1's glossary terms;
    ``budget``: an update tick's budget for their rows (``updates``, ``terms``: :class:`RowBudget`)."""
    texts = tqdm(iter_corpus_texts(corpus, cfg.text_columns), desc="stage 1: reading the corpus", unit=" texts",
                 disable=None, dynamic_ncols=True)  # None: on a terminal only
    sample = bottom_k(texts, cfg.sample_texts)
    texts.close()
    log.info("stage 1: %s texts from %s", f"{sample.corpus_texts:,}" if sample.whole else
             f"a sample of {len(sample.texts):,} of the {sample.corpus_texts:,}", corpus)
    terms = None if glossary is None else GlossaryTerms(tuple(read_entries(entries)), glossary.min_count,
                                                        glossary.define_steps, budget and RowBudget(**budget))
    reduce_texts = list(iter_corpus_texts(cfg.reduce_to_corpus, cfg.text_columns)) if cfg.reduce_to_corpus else None
    existed = Path(out_dir).exists()
    try:
        report = vocab.build_expanded_model(sample.texts, Path(out_dir), cfg, reduce_texts, progress=True,
                                            corpus_texts=sample.corpus_texts, glossary=terms)
    except BaseException:
        if not existed and Path(out_dir).is_dir() and not any(Path(out_dir).iterdir()):  # no empty folder left
            Path(out_dir).rmdir()
        raise
    return {"out_dir": out_dir, **asdict(report)}

