"""Stage 1: domain tokenizer training and vocabulary expansion (docs/method.md, Stage 1).

1. Train a tokenizer of the base tokenizer's own kind, normalizer and pre-tokenizer on the
   domain corpus (``train_new_from_iterator`` keeps all three).
2. New tokens = its tokens missing from the base vocabulary, minus specials and minus any
   token the base tokenizer can only express with its unknown token.
3. Insert them into the base tokenizer's *model*, so the real algorithm produces them:
   - WordPiece (BERT family): vocabulary entries; a continuation piece ``##xyz`` is matched
     mid-word, which an "added token" (whole-word match only) never is.
   - BPE (RoBERTa/GPT-2 family): vocabulary entries plus merges ranked after every base
     merge that build each new token from its base pieces (a chain whose intermediate
     results are new tokens too, never base ones).
   - Unigram (XLM-R/SentencePiece family): pieces whose score beats the base segmentation
     they replace (``max(domain score, sum of base piece scores + margin)``).
   In all three the new tokens only ever *coarsen* the base segmentation: a text whose new
   tokenization holds no new token is tokenized exactly as before.
4. Grow the embedding matrix; each new row is the mean of the base rows of the pieces the
   *base* tokenizer splits the token into (``##xyz`` split as it occurs inside a word).
   Old rows stay bit-identical; the encoder is untouched. The rows are then distilled
   (:mod:`mosaic_core.vocab.distill`).
5. Drop the share ``VocabConfig.prune`` (default 30 %) of the added tokens whose rows still cost
   the most per base piece saved (:func:`mosaic_core.vocab.distill.token_costs`), settle the
   selection again and rebuild tokenizer and rows; kept tokens keep their rows. Every share
   from 10 % to 50 % is measured too, for the report's trade-off.

The new token ids are the domain vocabulary V_D used by the domain-restricted MLM of stage 2.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from mosaic_core.config import PromptsConfig, VocabConfig
from mosaic_core.data.glossary import GlossaryEntry
from mosaic_core.modeling.card import facts, render
from mosaic_core.modeling.encode import max_positions, read_st_pooling
from mosaic_core.modeling.heads import masked_lm_with_head
from mosaic_core.modeling.modeldir import (load_head, read_domain_ids, save_head, write_card, write_domain_ids,
                                          write_vocab_report)
from mosaic_core.modeling.prompts import declare_prompts, resolve_prompts
from mosaic_core.modeling.refs import resolve_model
from mosaic_core.modeling.sparse import convert_to_sparse
from mosaic_core.versioning import runtime
from mosaic_core.vocab.define import GlossaryTerms, define_rows, glossary_candidates
from mosaic_core.vocab.distill import distill_rows, drift, token_costs, token_drift
from mosaic_core.vocab.reduce import reduce_vocabulary
from mosaic_core.vocab.report import VocabReport
from mosaic_core.vocab.rows import expand_embeddings, expand_mlm_bias
from mosaic_core.vocab.selection import (
    LADDER,
    REJECT_REASONS,
    Segmenter,
    Selection,
    Selector,
    fertility_of,
    word_counts,
)
from mosaic_core.vocab.tokenizers import (
    SPECS,
    VocabSpec,
    candidate_tokens,
    expand_tokenizer,
    next_free_id,
    spec_of,
    tokenizer_state,
    train_domain_tokenizer,
)

log = logging.getLogger(__name__)


DRIFT_MAX_LENGTH = 256
PRUNE_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5)  # the trade-off a pruned stage 1 reports


def select_with_table(spec: VocabSpec, state: dict, candidates: dict[str, list[str]], counts, held, first_id: int,
                      domain_state: dict, cfg: VocabConfig, floors: dict[str, int] | None = None,
                      ) -> tuple[Selection, list[dict], Selector]:
    """(the selection at ``cfg.min_count`` (and ``cfg.max_tokens``), for every threshold of the
    ladder the tokens added and the held-out fertility they give, the selector), from one climb;
    ``floors``: token → the most uses it needs whatever the threshold (glossary terms)."""
    selector = Selector(spec, state, counts, first_id, domain_state, floors=floors)
    rows, chosen = [], None
    for step in selector.ladder(candidates, sorted({*LADDER, cfg.min_count})):
        trial = copy.deepcopy(state)
        spec.insert(trial["model"], step.tokens, first_id, domain_state)
        _, fert, single = fertility_of(Segmenter(trial), held)
        rows.append({"min_count": step.min_count, "tokens": len(step.tokens), "fertility": fert, "single": single})
        if step.min_count == cfg.min_count:
            chosen = selector.settle(step, cfg.min_count, cfg.max_tokens) if cfg.max_tokens else step
    return chosen, rows, selector


def _rejected_examples(chosen: Selection, per_reason: int = 15) -> dict[str, list[dict]]:
    """The most-used rejected candidates of each reason (the fragments a user wants to see)."""
    out: dict[str, list[dict]] = {}
    for reason in REJECT_REASONS:
        tokens = sorted((t for t, r in chosen.rejected.items() if r == reason),
                        key=lambda t: (-chosen.rejected_uses.get(t, 0), t))
        out[reason] = [{"token": t, "uses": chosen.rejected_uses.get(t)} for t in tokens[:per_reason]]
    return out


def _save_mlm_head(base_model: str, out_dir: Path, encoder: torch.nn.Module, new_ids: list[int],
                   piece_ids: list[list[int]]) -> bool:
    """Keep the checkpoint's MLM head (if it ships one; says whether) for stage 2: its embeddings
    are the expanded encoder's (the decoder is tied to them) and the decoder bias grows consistently.
    A base that is itself a MOSAIC model (an update tick's stage 1 from the live model) keeps its
    trained head (``mlm_head.*``), the bias grown the same way."""
    trained = load_head(resolve_model(base_model))
    if trained is not None:
        weights, settings = trained
        bias = weights["bias"]
        if new_ids and bias.shape[0] != min(new_ids):
            raise RuntimeError(f"{base_model}: its MLM head's bias has {bias.shape[0]} entries, and the new tokens "
                               f"start at id {min(new_ids)}")
        save_head(out_dir, {**weights, "bias": expand_mlm_bias(bias, piece_ids) if new_ids else bias}, settings)
        return True
    mlm = masked_lm_with_head(resolve_model(base_model))
    if mlm is None:
        return False
    old_bias = mlm.get_output_embeddings().bias.detach().clone()
    expand_embeddings(mlm, new_ids, piece_ids, encoder.get_input_embeddings().weight.shape[0])
    with torch.no_grad():
        mlm.get_input_embeddings().weight.copy_(encoder.get_input_embeddings().weight)
        bias = mlm.get_output_embeddings().bias
        bias[: old_bias.shape[0]] = old_bias
        bias[new_ids] = expand_mlm_bias(old_bias, piece_ids)[old_bias.shape[0]:]
    mlm.save_pretrained(out_dir)
    return True


def _reduce_then_expand(texts: Sequence[str], out_dir: Path, cfg: VocabConfig, reduce_texts: Sequence[str],
                        progress: bool, corpus_texts: int | None, glossary: GlossaryTerms | None) -> VocabReport:
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".reduced-") as reduced_dir:
        reduction = reduce_vocabulary(cfg.base_model, reduce_texts, Path(reduced_dir))
        prompts = resolve_prompts(resolve_model(cfg.base_model), cfg.prompts)  # the base's, not the copy's
        report = build_expanded_model(texts, out_dir, cfg.model_copy(update={
            "base_model": reduced_dir, "prompts": PromptsConfig(**prompts.as_dict())}), progress=progress,
            corpus_texts=corpus_texts, glossary=glossary)
    report.reduction, report.base_model = asdict(reduction), cfg.base_model
    write_vocab_report(out_dir, report.to_json(), report.to_markdown())
    write_card(out_dir, render(facts(str(out_dir), "its domain corpus")))
    return report


class _Clock:
    """Seconds per named step."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self._t
        log.info("stage 1: %s done in %.0f s", name, now - self._t)
        self._t = now


@dataclass
class VocabPlan:
    """What stage 1 decided before touching the model: the candidates and the selection."""

    spec: VocabSpec
    state: dict
    domain: PreTrainedTokenizerBase
    candidates: dict[str, list[str]]
    skipped: int
    first_id: int
    chosen: Selection
    thresholds: list[dict]
    held: Counter
    selector: Selector
    glossary: dict[str, GlossaryEntry] = field(default_factory=dict)
    """The candidates that are one-word glossary names → their entry: selected on their own
    evidence (``GlossaryTerms.min_count``), never pruned."""
    terms: GlossaryTerms | None = None
    """The glossary (its budget for the rows learnt from the definitions: :func:`define_rows`)."""


def split_heldout(texts: Sequence[str], every: int) -> tuple[list[str], list[str]]:
    """(training texts, held-out texts): every ``every``-th text, from the first, is held out."""
    return [t for i, t in enumerate(texts) if i % every], [t for i, t in enumerate(texts) if not i % every]


def plan_vocabulary(base_tok: PreTrainedTokenizerBase, train: list[str], heldout: list[str], rows: int,
                    cfg: VocabConfig, clock: _Clock, glossary: GlossaryTerms | None = None) -> VocabPlan:
    """Train the domain tokenizer on ``train`` and select its tokens by their evidence; a
    glossary's one-word names that the base splits are candidates too, on evidence of their own."""
    state = tokenizer_state(base_tok)
    spec = spec_of(state)  # before training: an unsupported kind fails at once
    counts = word_counts(base_tok, train)
    domain = train_domain_tokenizer(base_tok, train, cfg.vocab_size or len(base_tok), cfg.min_frequency, counts)
    candidates, skipped = candidate_tokens(spec, base_tok, domain)
    named = glossary_candidates(spec, base_tok, glossary) if glossary else {}
    if named:  # in the candidates' stable order: shortest first, then by the token
        candidates = dict(sorted({**candidates, **{t: p for t, (p, _) in named.items()}}.items(),
                                 key=lambda kv: (len(kv[0]), kv[0])))
    clock.lap("domain tokenizer")
    first_id = max(next_free_id(state), rows)  # padded matrices: never reuse a row
    held = word_counts(base_tok, heldout)
    floors = dict.fromkeys(named, glossary.min_count) if named else None
    chosen, thresholds, selector = select_with_table(spec, state, candidates, counts, held, first_id,
                                                     tokenizer_state(domain), cfg, floors)
    clock.lap("selection")
    return VocabPlan(spec, state, domain, candidates, skipped, first_id, chosen, thresholds, held, selector,
                     {t: e for t, (_, e) in named.items()}, glossary)


@dataclass
class Expansion:
    """The model as stage 1 expands it: the encoder (its rows for the new tokens included) and its
    pooling, the base and the expanded tokenizers, and the new tokens (``entries``: token → its
    base pieces; their ``new_ids`` and ``piece_ids``)."""

    encoder: torch.nn.Module
    pooling: str
    base_tok: PreTrainedTokenizerBase
    expanded: PreTrainedTokenizerBase
    entries: dict[str, list[str]]
    new_ids: list[int]
    piece_ids: list[list[int]]

    def drift(self, texts: list[str], length: int) -> dict:
        """How far the expanded model's embeddings of ``texts`` are from the base's (:func:`drift`)."""
        return drift(self.encoder, self.pooling, self.base_tok, self.expanded, texts, length)


@dataclass
class Drifts:
    """What the new rows did to the embeddings, as the report shows it."""

    mean_init: dict | None = None
    distilled: dict | None = None
    final: dict | None = None
    per_token: dict | None = None
    defined: dict | None = None
    """The glossary rows learnt from their definitions (:func:`define_rows`'s record)."""


def _distill(x: Expansion, texts: tuple[list[str], list[str]], cfg: VocabConfig, out_dir: Path, progress: bool,
             clock: _Clock) -> dict | None:
    """The distillation's result when ``cfg.init`` asks for one (the new rows hold the mean of
    their pieces on entry and the distilled rows on return), else ``None``."""
    if cfg.init != "distill":
        return None
    fingerprint = hashlib.sha256(json.dumps([x.new_ids, x.expanded.convert_ids_to_tokens(x.new_ids),
                                             cfg.model_dump(mode="json")]).encode()).hexdigest()
    result = distill_rows(x.encoder, x.pooling, x.base_tok, x.expanded, x.new_ids, *texts, cfg.distill, out_dir,
                          fingerprint, progress=progress).to_dict()
    clock.lap("distillation")
    return result


def prune_selection(plan: VocabPlan, costs: dict[str, dict], share: float,
                    cfg: VocabConfig) -> tuple[Selection, list[str]]:
    """(the selection without the ``share`` of its tokens that cost the most per piece saved,
    settled again; those tokens, costliest first). ``costs``: token → :func:`token_costs`'s
    entry; a token with no measured cost is kept, and so is a glossary term (the share is of the
    others). Deterministic: ties break on the token."""
    chosen = plan.chosen
    prunable = [t for t in chosen.tokens if t not in plan.glossary]  # a glossary term is never pruned
    ranked = sorted((t for t in prunable if t in costs), key=lambda t: (-costs[t]["cost"], t))
    drop = ranked[: round(share * len(prunable))]
    start = Selection({t: p for t, p in chosen.tokens.items() if t not in set(drop)},
                      {**chosen.rejected, **dict.fromkeys(drop, "costly")},
                      {**chosen.rejected_uses, **{t: chosen.uses[t] for t in drop}}, {}, {}, chosen.iterations,
                      chosen.min_count)
    return plan.selector.settle(start, cfg.min_count, cfg.max_tokens), drop


def _pruned_model(plan: VocabPlan, selection: Selection, rows: dict[str, torch.Tensor], x: Expansion,
                  out_dir: Path) -> Expansion:
    """``x`` with the tokenizer of ``selection`` (saved to ``out_dir``) and the encoder's rows for
    it: a kept token keeps its row in ``rows``; ids stay contiguous from ``plan.first_id``."""
    expanded, entries = expand_tokenizer(x.base_tok, plan.spec, selection.tokens, plan.first_id, plan.domain,
                                         out_dir)
    new_ids = expanded.convert_tokens_to_ids(list(entries))
    piece_ids = [[plan.spec.vocab[p] for p in pieces] for pieces in entries.values()]
    x.encoder.resize_token_embeddings(plan.first_id, mean_resizing=False)  # the base rows only
    expand_embeddings(x.encoder, new_ids, piece_ids, plan.first_id + len(entries))
    with torch.no_grad():
        weight = x.encoder.get_input_embeddings().weight
        for token, i in zip(entries, new_ids, strict=True):
            if token in rows:  # else (a BPE merge intermediate new to this chain): the mean of its pieces
                weight[i] = rows[token]
    return Expansion(x.encoder, x.pooling, x.base_tok, expanded, entries, new_ids, piece_ids)


def _prune(plan: VocabPlan, x: Expansion, train: list[str], heldout: list[str], length: int, cfg: VocabConfig,
           out_dir: Path) -> tuple[Expansion, dict]:
    """Drop the costliest tokens (:func:`prune_selection`) and rebuild the tokenizer and the rows
    (:func:`_pruned_model`); ``plan.chosen`` becomes the pruned selection. Every share of
    :data:`PRUNE_SHARES` is built and measured too (tokens, held-out fertility, drift), so the
    report shows the trade-off. Returns (the pruned expansion, the pruning's record for the
    report: its ``trade_off`` holds the chosen share's drift)."""
    measured = token_costs(x.encoder, x.pooling, x.base_tok, x.expanded, train, cfg.distill.max_length,
                           plan.first_id, cfg.prune_sentences, cfg.distill.seed)
    costs = {x.expanded.convert_ids_to_tokens(t): c for t, c in measured.items()}
    fertility_before = fertility_of(Segmenter(tokenizer_state(x.expanded)), plan.held)[1]
    weight = x.encoder.get_input_embeddings().weight
    rows = dict(zip(x.entries, weight.detach()[x.new_ids].clone(), strict=True))

    def point(share: float, y: Expansion) -> dict:
        return {"share": share, "tokens": len(y.entries),
                "fertility": fertility_of(Segmenter(tokenizer_state(y.expanded)), plan.held)[1],
                "drift": y.drift(heldout, length)}

    trade_off = []
    for share in sorted(set(PRUNE_SHARES) - {cfg.prune}):  # the chosen share last: its rows stay in the encoder
        with tempfile.TemporaryDirectory() as tmp:
            trade_off.append(point(share, _pruned_model(plan, prune_selection(plan, costs, share, cfg)[0], rows, x,
                                                        Path(tmp))))
    selection, dropped = prune_selection(plan, costs, cfg.prune, cfg)
    pruned = _pruned_model(plan, selection, rows, x, out_dir)
    trade_off = sorted([*trade_off, point(cfg.prune, pruned)], key=lambda p: p["share"])
    record = {"share": cfg.prune, "sentences_per_token": cfg.prune_sentences, "measured": len(costs),
              "dropped": len(dropped), "tokens_before": len(x.entries), "fertility_before": fertility_before,
              "settled_out": len(plan.chosen.tokens) - len(dropped) - len(selection.tokens),
              "costliest": [{"token": t, **costs[t]} for t in dropped[:15]],
              "kept_max_cost": max((costs[t]["cost"] for t in selection.tokens if t in costs), default=None),
              "trade_off": trade_off}
    plan.chosen = selection
    return pruned, record


def _rows(plan: VocabPlan, x: Expansion, texts: tuple[list[str], list[str]], cfg: VocabConfig, out_dir: Path,
          progress: bool, clock: _Clock) -> tuple[Drifts, dict | None, Expansion]:
    """Initialise the new rows, prune when ``cfg.prune`` says so, measure the drift. Returns (the
    drifts and the distillation's result, the pruning's record or ``None``, the expansion as stage
    1 saves it)."""
    if not x.entries:
        return Drifts(), None, x
    heldout = texts[1][: cfg.distill.heldout_texts]
    length = min(DRIFT_MAX_LENGTH, max_positions(x.encoder.config))
    drifts = Drifts(mean_init=x.drift(heldout, length))
    drifts.distilled = _distill(x, texts, cfg, out_dir, progress, clock)
    pruned = None
    if cfg.prune:
        unpruned = x.drift(heldout, length) if drifts.distilled else None
        x, pruned = _prune(plan, x, texts[0], heldout, length, cfg, out_dir)
        pruned["drift_before"] = unpruned
        drifts.final = next(p["drift"] for p in pruned["trade_off"] if p["share"] == cfg.prune)
        clock.lap("pruning")
    elif x.new_ids and drifts.distilled:
        drifts.final = x.drift(heldout, length)
    defined = {i: plan.glossary[t] for t, i in zip(x.entries, x.new_ids, strict=True) if t in plan.glossary}
    if defined and plan.terms is not None and plan.terms.define_steps:
        drifts.defined = define_rows(x.encoder, x.pooling, x.base_tok, x.expanded, defined, texts[0], cfg.distill,
                                     plan.terms.define_steps, budget=plan.terms.budget)
        drifts.final = x.drift(heldout, length)
        clock.lap("glossary rows")
    drifts.per_token = token_drift(x.encoder, x.pooling, x.base_tok, x.expanded, heldout, length, plan.first_id)
    clock.lap("drift per token")
    return drifts, pruned, x


def _report(plan: VocabPlan, x: Expansion, cfg: VocabConfig, drifts: Drifts, pruned: dict | None,
            clock: _Clock) -> VocabReport:
    chosen, entries = plan.chosen, x.entries
    words, fert_before, single_before = fertility_of(Segmenter(plan.state), plan.held)
    _, fert_after, single_after = fertility_of(Segmenter(tokenizer_state(x.expanded)), plan.held)
    by_saving = sorted(chosen.tokens, key=lambda t: (-chosen.saved[t], t))
    return VocabReport(
        base_vocab_size=len(x.base_tok), domain_tokenizer_size=len(plan.domain), candidates=len(plan.candidates),
        base_model=cfg.base_model, tokens_added=len(entries), skipped_unknown=plan.skipped,
        first_new_id=plan.first_id, kind=next(k for k, c in SPECS.items() if isinstance(plan.spec, c)),
        min_count=cfg.min_count, max_tokens=cfg.max_tokens, rejected=dict(Counter(chosen.rejected.values())),
        rejected_examples=_rejected_examples(chosen), thresholds=plan.thresholds,
        no_merge_chain=len(set(chosen.tokens) - set(entries)),
        merge_intermediates=len(set(entries) - set(chosen.tokens)),
        examples=[{"token": t, "base_pieces": entries[t], "uses": chosen.uses[t]} for t in by_saving[:25]
                  if t in entries],
        heldout_words=words, fertility_before=fert_before, fertility_after=fert_after,
        single_token_share_before=single_before, single_token_share_after=single_after, init=cfg.init,
        distill=drifts.distilled, drift_mean_init=drifts.mean_init, drift=drifts.final or drifts.mean_init,
        token_drift=drifts.per_token, pruned=pruned, seconds=clock.laps, seed=cfg.distill.seed, runtime=runtime(),
        glossary=_glossary_record(plan, entries, drifts.defined) if plan.glossary else None)


def _glossary_record(plan: VocabPlan, entries: dict[str, list[str]], defined: dict | None) -> dict:
    """What stage 1 did with the glossary's one-word names: each one the base splits, added (with
    its base pieces and uses) or rejected (with the reason), and how their rows were learnt."""
    chosen = plan.chosen
    return {"candidates": len(plan.glossary),
            "added": [{"token": t, "term": e.term, "base_pieces": entries[t], "uses": chosen.uses.get(t, 0)}
                      for t, e in sorted(plan.glossary.items()) if t in entries],
            "rejected": [{"token": t, "term": e.term, "reason": chosen.rejected.get(t, "no_merge_chain"),
                          "uses": chosen.rejected_uses.get(t, 0)}
                         for t, e in sorted(plan.glossary.items()) if t not in entries],
            "defined": defined}


def build_expanded_model(texts: Sequence[str], out_dir: Path, cfg: VocabConfig,
                         reduce_texts: Sequence[str] | None = None, progress: bool = False,
                         corpus_texts: int | None = None, glossary: GlossaryTerms | None = None) -> VocabReport:
    """Stage 1 end to end: train the domain tokenizer, select its tokens by evidence, expand the
    tokenizer and the embeddings, initialise the new rows (mean of pieces, then distilled),
    save, report.

    ``out_dir`` receives a model that ``SentenceTransformer(out_dir)`` and
    ``AutoModel``/``AutoTokenizer`` load directly, plus V_D and the report
    (:mod:`mosaic_core.modeling.modeldir`). With ``reduce_texts`` the base vocabulary is first reduced
    to the rows those texts use (:func:`reduce_vocabulary`), then expanded. ``corpus_texts``: how
    many texts the corpus had when ``texts`` is a sample of it (:mod:`mosaic_core.vocab.sample`).
    ``glossary``: its one-word terms are candidates on evidence of their own, never pruned, their
    rows learnt from their definitions (:mod:`mosaic_core.vocab.define`).
    """
    from sentence_transformers import SentenceTransformer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if reduce_texts is not None:
        return _reduce_then_expand(texts, out_dir, cfg, reduce_texts, progress, corpus_texts, glossary)
    clock = _Clock()
    st = SentenceTransformer(resolve_model(cfg.base_model), device="cpu")
    transformer, base_tok = st[0], st[0].tokenizer
    encoder = transformer.auto_model
    train, heldout = split_heldout(texts, cfg.heldout_every)
    if not train:
        raise ValueError("the domain corpus is empty: nothing to train a tokenizer on")
    plan = plan_vocabulary(base_tok, train, heldout, encoder.get_input_embeddings().weight.shape[0], cfg, clock,
                           glossary)
    expanded, entries = expand_tokenizer(base_tok, plan.spec, plan.chosen.tokens, plan.first_id, plan.domain,
                                         out_dir)
    new_ids = expanded.convert_tokens_to_ids(list(entries))
    if new_ids != list(range(plan.first_id, plan.first_id + len(entries))):
        raise RuntimeError(f"the saved tokenizer does not give the new tokens ids {plan.first_id}… in order")
    piece_ids = [[plan.spec.vocab[p] for p in pieces] for pieces in entries.values()]
    expand_embeddings(encoder, new_ids, piece_ids, plan.first_id + len(entries))
    pooling = read_st_pooling(resolve_model(cfg.base_model))[0] or "mean"
    drifts, pruned, x = _rows(plan, Expansion(encoder, pooling, base_tok, expanded, entries, new_ids, piece_ids),
                              (train, heldout), cfg, out_dir, progress, clock)
    transformer.processor = x.expanded  # sentence-transformers 6: the tokenizer is its processor
    st.save(str(out_dir))
    if not _save_mlm_head(cfg.base_model, out_dir, encoder, x.new_ids, x.piece_ids) and cfg.model_kind == "sparse":
        log.warning("stage 1: %s ships no masked-LM head, so the sparse model's head starts random: train it "
                    "first (the warmup preset's mlm stage) or start from a model with a head", cfg.base_model)
    if cfg.model_kind == "sparse":
        convert_to_sparse(out_dir)
    declare_prompts(out_dir, resolve_prompts(resolve_model(cfg.base_model), cfg.prompts))
    kept = read_domain_ids(resolve_model(cfg.base_model))  # a MOSAIC base keeps its V_D: the new tokens join it
    write_domain_ids(out_dir, [*(kept.tolist() if kept is not None else []), *x.new_ids])
    clock.lap("save")
    report = _report(plan, x, cfg, drifts, pruned, clock)
    report.corpus = {"texts": corpus_texts or len(texts), "sampled": len(texts)}
    write_vocab_report(out_dir, report.to_json(), report.to_markdown())
    write_card(out_dir, render(facts(str(out_dir), "its domain corpus")))
    log.info("stage 1: added %d of %d candidate tokens; fertility %.3f -> %.3f", report.tokens_added,
             report.candidates, report.fertility_before, report.fertility_after)
    return report
