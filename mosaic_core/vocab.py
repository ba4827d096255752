"""Stage 1: domain tokenizer training and vocabulary expansion (METHOD.md, Stage 1).

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
   (:mod:`mosaic_core.distill`).
5. Drop the share ``VocabConfig.prune`` (default 30 %) of the added tokens whose rows still cost
   the most per base piece saved (:func:`mosaic_core.distill.token_costs`), settle the
   selection again and rebuild tokenizer and rows; kept tokens keep their rows. Every share
   from 10 % to 50 % is measured too, for the report's trade-off.

The new token ids are the domain vocabulary V_D used by the domain-restricted MLM of stage 2.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from mosaic_core.config import VocabConfig
from mosaic_core.distill import distill_rows, drift, token_costs, token_drift
from mosaic_core.encode import max_positions, read_st_pooling
from mosaic_core.card import facts, render
from mosaic_core.modeldir import write_card, write_domain_ids, write_vocab_report
from mosaic_core.models import resolve_model
from mosaic_core.sparse import convert_to_sparse
from mosaic_core.selection import (
    LADDER,
    REJECT_REASONS,
    Segmenter,
    Selection,
    Selector,
    fertility_of,
    word_counts,
)

log = logging.getLogger(__name__)

# Slow-tokenizer files that a rewritten tokenizer.json would contradict; tokenizer.json is
# what AutoTokenizer and sentence-transformers load.
STALE_TOKENIZER_FILES = ("vocab.txt", "vocab.json", "merges.txt", "sentencepiece.bpe.model", "spiece.model",
                         "tokenizer.model")


class UnsupportedTokenizer(ValueError):
    """The base tokenizer's model kind cannot be expanded."""


def tokenizer_state(tokenizer: PreTrainedTokenizerBase) -> dict:
    """The fast tokenizer's full serialised state (``tokenizer.json`` as a dict)."""
    if not getattr(tokenizer, "is_fast", False):
        raise UnsupportedTokenizer(f"{type(tokenizer).__name__} has no fast (tokenizers) backend to expand")
    return json.loads(tokenizer.backend_tokenizer.to_str())


def next_free_id(state: dict) -> int:
    """The first id above every vocabulary entry and added token of a tokenizer state."""
    vocab = state["model"]["vocab"]
    ids = range(len(vocab)) if isinstance(vocab, list) else vocab.values()
    return max([*ids, *(t["id"] for t in state.get("added_tokens", []))]) + 1


@dataclass(frozen=True)
class WordPieceSpec:
    """What the WordPiece algorithm of a tokenizer needs: its vocabulary and conventions."""

    vocab: dict[str, int]
    prefix: str
    unk_token: str
    max_chars: int

    @classmethod
    def from_state(cls, state: dict) -> WordPieceSpec:
        model = state["model"]
        return cls(model["vocab"], model["continuing_subword_prefix"], model["unk_token"],
                   model["max_input_chars_per_word"])

    def split(self, word: str, continuation: bool = False) -> list[str] | None:
        """Greedy longest-match-first WordPiece of one pre-tokenized ``word``.

        ``continuation`` splits it as it would occur inside a word (every piece, the first
        included, carries the prefix). ``None`` where the only rendering is the unknown token.
        """
        if len(word) > self.max_chars:
            return None
        pieces, start = [], 0
        while start < len(word):
            end, piece = len(word), None
            while start < end:
                candidate = word[start:end]
                if start > 0 or continuation:
                    candidate = self.prefix + candidate
                if candidate in self.vocab:
                    piece = candidate
                    break
                end -= 1
            if piece is None:
                return None
            pieces.append(piece)
            start = end
        return pieces

    def base_pieces(self, token: str) -> list[str] | None:
        """How the base vocabulary renders a (domain) vocabulary entry."""
        if token.startswith(self.prefix):
            return self.split(token[len(self.prefix):], continuation=True)
        return self.split(token)

    def insert(self, model: dict, pieces: dict[str, list[str]], first_id: int, domain: dict) -> dict[str, list[str]]:
        """Add the tokens (keys of ``pieces``) to the serialised WordPiece ``model`` from ``first_id`` on."""
        for offset, token in enumerate(pieces):
            model["vocab"][token] = first_id + offset
        return dict(pieces)


@dataclass(frozen=True)
class BPESpec:
    """A BPE model (byte-level or not): its vocabulary, merges and unknown token."""

    vocab: dict[str, int]
    unk_token: str | None
    model: object = field(compare=False, repr=False)

    @classmethod
    def from_state(cls, state: dict) -> BPESpec:
        model = state["model"]
        if model.get("continuing_subword_prefix"):
            raise UnsupportedTokenizer("BPE with a continuing-subword prefix cannot be expanded; "
                                       "byte-level BPE (RoBERTa/GPT-2 family) can")
        return cls(model["vocab"], model.get("unk_token"), _model_of(state))

    def base_pieces(self, token: str) -> list[str] | None:
        pieces = [t.value for t in self.model.tokenize(token)]
        return None if self.unk_token in pieces or "".join(pieces) != token else pieces

    def insert(self, model: dict, pieces: dict[str, list[str]], first_id: int, domain: dict) -> dict[str, list[str]]:
        """Add the tokens (keys of ``pieces``) and merges that build each of them, ranked
        after every base merge: base merges run first and yield the base pieces; the new ones
        only join base pieces into new tokens.

        Token by token (domain order), the merges added so far are replayed on its base
        pieces; a left (or, failing that, right) chain of merges then joins what remains.
        Appended merges rank after all earlier ones, so every accepted token is produced
        whole from its own word, and tokens accepted earlier stay so. A chain is usable only
        if none of its results is a *base* token (that merge would change texts that use no
        new token); tokens without one are left out. Intermediate results become new tokens.
        Returns every new entry, in id order, with its base pieces."""
        ranks: dict[tuple[str, str], int] = {}
        entries: dict[str, list[str]] = {}
        for token, parts in pieces.items():
            chain = self._chain(self._apply(parts, ranks))
            if chain is None:
                log.debug("BPE: no merge chain for %r avoids base tokens; left out", token)
                continue
            for a, b in chain:
                ranks.setdefault((a, b), len(ranks))
                entries.setdefault(a + b, pieces.get(a + b) or self.base_pieces(a + b))
        old = model["merges"]
        as_lists = not old or isinstance(old[0], list)
        old.extend([list(pair) if as_lists else " ".join(pair) for pair in ranks])
        for offset, token in enumerate(entries):
            model["vocab"][token] = first_id + offset
        return entries

    @staticmethod
    def _apply(parts: list[str], ranks: dict[tuple[str, str], int]) -> list[str]:
        """The BPE merge loop (lowest rank first, leftmost on ties) with the ``ranks`` merges."""
        parts = list(parts)
        while len(parts) > 1:
            found = [(ranks[pair], i) for i, pair in enumerate(zip(parts, parts[1:], strict=False)) if pair in ranks]
            if not found:
                break
            _, i = min(found)
            parts[i: i + 2] = [parts[i] + parts[i + 1]]
        return parts

    def _chain(self, parts: list[str]) -> list[tuple[str, str]] | None:
        """Merges joining ``parts`` into one token, none producing a base token ([] if joined)."""
        left = [("".join(parts[:i]), parts[i]) for i in range(1, len(parts))]
        right = [(parts[i], "".join(parts[i + 1:])) for i in range(len(parts) - 2, -1, -1)]
        for chain in (left, right):
            if all(a + b not in self.vocab for a, b in chain):
                return chain
        return None


@dataclass(frozen=True)
class UnigramSpec:
    """A Unigram (SentencePiece) model: pieces with log-probability scores."""

    vocab: dict[str, int]
    scores: list[float]
    unk_id: int | None
    model: object = field(compare=False, repr=False)

    MARGIN = 1e-3  # score a new piece needs above the base segmentation it replaces

    @classmethod
    def from_state(cls, state: dict) -> UnigramSpec:
        pieces = state["model"]["vocab"]
        return cls({p: i for i, (p, _) in enumerate(pieces)}, [s for _, s in pieces], state["model"].get("unk_id"),
                   _model_of(state))

    def base_pieces(self, token: str) -> list[str] | None:
        found = self.model.tokenize(token)
        return None if any(t.id == self.unk_id for t in found) else [t.value for t in found]

    def insert(self, model: dict, pieces: dict[str, list[str]], first_id: int, domain: dict) -> dict[str, list[str]]:
        """Append the tokens (keys of ``pieces``) as pieces scored ``max(domain score, base split score + margin)``:
        never below the base segmentation they replace, so the Viterbi search picks a new
        piece at least where its base pieces would have stood."""
        if first_id != len(model["vocab"]):
            raise UnsupportedTokenizer(f"Unigram ids are positions: new pieces must start at {len(model['vocab'])}, "
                                       f"not {first_id} (the embedding matrix has rows beyond the tokenizer)")
        domain_scores = dict(map(tuple, domain["model"]["vocab"]))
        for token, parts in pieces.items():
            base = sum(self.scores[self.vocab[p]] for p in parts) + self.MARGIN
            model["vocab"].append([token, max(domain_scores.get(token, -math.inf), base)])
        return dict(pieces)


SPECS = {"WordPiece": WordPieceSpec, "BPE": BPESpec, "Unigram": UnigramSpec}
VocabSpec = WordPieceSpec | BPESpec | UnigramSpec


def spec_of(state: dict) -> VocabSpec:
    """The expansion rules for a tokenizer state's model kind; a clear error for other kinds."""
    kind = state["model"]["type"]
    if kind not in SPECS:
        raise UnsupportedTokenizer(f"vocabulary expansion supports {', '.join(SPECS)} tokenizers "
                                   f"(BERT, RoBERTa/GPT-2 and XLM-R families); this one is {kind}")
    return SPECS[kind].from_state(state)


def _model_of(state: dict):
    return Tokenizer.from_str(json.dumps(state)).model


@dataclass
class VocabReport:
    """What stage 1 did, with the numbers a person checks first."""

    base_vocab_size: int
    domain_tokenizer_size: int
    candidates: int
    base_model: str
    tokens_added: int
    skipped_unknown: int
    first_new_id: int
    kind: str = "WordPiece"
    min_count: int = 1
    max_tokens: int | None = None
    rejected: dict[str, int] = field(default_factory=dict)
    rejected_examples: dict[str, list[dict]] = field(default_factory=dict)
    thresholds: list[dict] = field(default_factory=list)
    no_merge_chain: int = 0
    merge_intermediates: int = 0
    examples: list[dict] = field(default_factory=list)
    heldout_words: int = 0
    fertility_before: float = 0.0
    fertility_after: float = 0.0
    single_token_share_before: float = 0.0
    single_token_share_after: float = 0.0
    init: str = "mean"
    distill: dict | None = None
    drift_mean_init: dict | None = None
    drift: dict | None = None
    token_drift: list[dict] | None = None
    pruned: dict | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    reduction: dict | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def to_markdown(self) -> str:
        return "\n".join(["# Vocabulary expansion", "", *self._summary(), "", *self._drift_lines(),
                          *self._threshold_table(), *self._rejected_lines(), *self._example_table()]) + "\n"

    def _summary(self) -> list[str]:
        gain = self.fertility_before - self.fertility_after
        lines = [
            f"- {self.kind} base vocabulary: {self.base_vocab_size:,}; domain tokenizer: "
            f"{self.domain_tokenizer_size:,}; candidates it has that the base lacks: {self.candidates:,} "
            f"(skipped as [UNK]-only: {self.skipped_unknown})",
            f"- tokens added (V_D): **{self.tokens_added:,}** (ids {self.first_new_id:,}–"
            f"{self.first_new_id + self.tokens_added - 1:,}): used at least {self.min_count} times in the corpus"
            + (f", at most {self.max_tokens:,}" if self.max_tokens else "")
            + "; " + ", ".join(f"{n:,} rejected as {r}" for r, n in self.rejected.items() if n),
            f"- held-out words: {self.heldout_words:,}; fertility (pieces/word) {self.fertility_before:.3f} → "
            f"**{self.fertility_after:.3f}** (−{gain:.3f}); single-token words "
            f"{self.single_token_share_before:.1%} → **{self.single_token_share_after:.1%}**",
            "- new rows: mean of their base pieces" + (", then distilled" if self.init == "distill" else "")
            + (f"; the costliest {self.pruned['share']:.0%} pruned" if self.pruned else "")
            + "; time: " + ", ".join(f"{k} {v:.0f} s" for k, v in self.seconds.items()),
        ]
        if self.kind == "BPE":
            lines.append(f"- BPE merges: {self.merge_intermediates:,} of the added tokens are intermediate merge "
                         f"results; {self.no_merge_chain:,} selected tokens left out (every merge chain passed "
                         "through a base token)")
        if self.reduction:
            lines.append(ReductionReport(**self.reduction).to_markdown().rstrip("\n"))
        return lines

    def _drift_lines(self) -> list[str]:
        if not self.drift_mean_init:
            return []
        lines = ["## Drift: cos(base embedding, stage-1 embedding) on held-out texts", "",
                 "| rows | mean | 5th percentile |", "| --- | ---: | ---: |",
                 f"| mean of pieces | {self.drift_mean_init['mean_cos']:.4f} | {self.drift_mean_init['p5_cos']:.4f} |"]
        final = self.drift and (self.init == "distill" or self.pruned)
        if self.pruned and self.pruned["drift_before"]:
            d = self.pruned["drift_before"]
            lines.append(f"| distilled, every selected token | {d['mean_cos']:.4f} | {d['p5_cos']:.4f} |")
        if final:
            name = ("distilled" if self.init == "distill" else "mean of pieces") + (", pruned" if self.pruned else "")
            lines.append(f"| {name} | **{self.drift['mean_cos']:.4f}** | **{self.drift['p5_cos']:.4f}** |")
        lines += ["", f"{self.drift_mean_init['texts']:,} held-out texts, {self.drift_mean_init['changed']:.0%} of "
                  "them hold a new token (the others embed exactly as before)."]
        if self.distill:
            d = self.distill
            lines.append(f"Distillation: {d['steps']} steps on {d['windows']:,} windows; held-out loss "
                         f"{d['heldout_loss_before']:.5f} → {d['heldout_loss_after']:.5f} (best at step "
                         f"{d['best_step']}; stopped: {d['stop_reason']}).")
        return [*lines, "", *self._pruned_lines(), *self._token_drift_lines()]

    def _pruned_lines(self) -> list[str]:
        if not self.pruned:
            return []
        p = self.pruned
        rows = [f"| `{t['token']}` | {t['cost']:.4f} | {t['rise']:+.4f} | {t['saved']:.2f} | {t['sentences']} |"
                for t in p["costliest"]]
        return ["### Pruned: the tokens that cost the most per piece saved", "",
                f"Each selected token was read as its base pieces again in up to {p['sentences_per_token']} training "
                f"sentences that hold it ({p['measured']:,} tokens measured); its cost is the mean rise of cos(base, "
                f"stage 1) that gives, per base piece it saves. The costliest {p['share']:.0%} were dropped "
                f"({p['dropped']:,} tokens; {p['settled_out']:,} more fell out when the selection settled again): "
                f"{p['tokens_before']:,} → {self.tokens_added:,} tokens, held-out fertility "
                f"{p['fertility_before']:.3f} → {self.fertility_after:.3f}. The costliest dropped:", "",
                "| token | cost per piece | rise | pieces saved | sentences |", "| --- | ---: | ---: | ---: | ---: |",
                *rows, "", *self._prune_trade_off()]

    def _prune_trade_off(self) -> list[str]:
        p = self.pruned
        if not p.get("trade_off"):
            return []
        gain = self.fertility_before - p["fertility_before"]
        points = [{"share": 0.0, "tokens": p["tokens_before"], "fertility": p["fertility_before"],
                   "drift": p["drift_before"] or self.drift_mean_init}, *p["trade_off"]]
        rows = [f"| {q['share']:.0%}{' (chosen)' if q['share'] == p['share'] else ''} | {q['tokens']:,} | "
                f"{q['fertility']:.3f} | {(self.fertility_before - q['fertility']) / gain if gain else 1:.0%} | "
                f"{q['drift']['mean_cos']:.4f} | {q['drift']['p5_cos']:.4f} |" for q in points]
        return ["### Pruning: the trade-off", "",
                "Each share pruned from the same rows and measured on the same held-out texts; the fertility gain "
                "kept is the share of the unpruned selection's gain over the base:", "",
                "| pruned | tokens added | held-out fertility | fertility gain kept | drift mean | drift p5 |",
                "| ---: | ---: | ---: | ---: | ---: | ---: |", *rows, ""]

    def _token_drift_lines(self, top: int = 15) -> list[str]:
        if not self.token_drift:
            return []
        worse = [t for t in self.token_drift if t["total_rise"] > 0]
        rows = [f"| `{t['token']}` | {t['texts']} | {t['mean_rise']:+.4f} | {t['total_rise']:+.4f} |"
                for t in self.token_drift[:top]]
        return ["### Which new tokens still move embeddings", "",
                f"Of the {len(self.token_drift):,} new tokens in these held-out texts, {len(worse):,} still lower "
                "the cosine: reading one of them as its base pieces again (every other new token kept) raises "
                "cos(base, stage 1) of a text holding it by the rise below. The most costly first:", "",
                "| token | held-out texts | mean rise | total rise |", "| --- | ---: | ---: | ---: |", *rows, ""]

    def _threshold_table(self) -> list[str]:
        if not self.thresholds:
            return []
        rows = [f"| {t['min_count']}{' (chosen)' if t['min_count'] == self.min_count else ''} | {t['tokens']:,} | "
                f"{t['fertility']:.3f} | {t['single']:.1%} |" for t in self.thresholds]
        return ["## Minimum corpus uses: the trade-off", "", "| min uses | tokens added | held-out fertility | "
                "single-token words |", "| ---: | ---: | ---: | ---: |", *rows, ""]

    def _rejected_lines(self) -> list[str]:
        lines = []
        for reason, examples in self.rejected_examples.items():
            if examples:
                shown = ", ".join(f"`{e['token']}`" + (f" ({e['uses']})" if e["uses"] is not None else "")
                                  for e in examples)
                lines.append(f"- rejected as {reason}" + (" (uses in the corpus)" if reason != "not_a_word" else "")
                             + f": {shown}")
        return ["## Rejected candidates", "", *lines, ""] if lines else []

    def _example_table(self) -> list[str]:
        rows = [f"| `{e['token']}` | {' '.join(e['base_pieces'])} | {e.get('uses', '')} |" for e in self.examples]
        return ["## Added tokens (largest saving first)", "", "| new token | base pieces | uses |",
                "| --- | --- | ---: |", *rows]


def train_domain_tokenizer(
    base: PreTrainedTokenizerBase, texts: Iterable[str], vocab_size: int, min_frequency: int
) -> PreTrainedTokenizerBase:
    """A tokenizer of the base's kind, normalizer and pre-tokenizer, trained on ``texts``."""
    return base.train_new_from_iterator(texts, vocab_size=vocab_size, min_frequency=min_frequency)


def candidate_tokens(
    spec: VocabSpec, base: PreTrainedTokenizerBase, domain: PreTrainedTokenizerBase
) -> tuple[dict[str, list[str]], int]:
    """(the domain tokenizer's tokens the base lacks → their base pieces, count skipped as
    UNK-only), shortest first, then by the token itself: a stable order whatever order the
    trainer gave (its tie-breaking varies between runs, huggingface/tokenizers#1794), and
    the order BPE chains are built in (shorter tokens first, so longer ones reuse them)."""
    specials = set(domain.all_special_tokens) | set(base.all_special_tokens)
    prefix = getattr(spec, "prefix", None)
    pieces, skipped = {}, 0
    for token in sorted(domain.get_vocab(), key=lambda t: (len(t), t)):
        if token in spec.vocab or token in specials or token == prefix:
            continue
        split = spec.base_pieces(token)
        if split is None:
            skipped += 1
            continue
        pieces[token] = split
    return pieces, skipped


def write_tokenizer(base: PreTrainedTokenizerBase, state: dict, out_dir: Path) -> PreTrainedTokenizerBase:
    """Save ``base``'s configuration with ``state`` as its tokenizer.json; return it reloaded.

    Slow-tokenizer vocabulary files are removed: they would contradict the new state, and
    tokenizer.json is what ``AutoTokenizer`` and sentence-transformers load."""
    base.save_pretrained(out_dir)
    for name in STALE_TOKENIZER_FILES:
        (out_dir / name).unlink(missing_ok=True)
    (out_dir / "tokenizer.json").write_text(json.dumps(state, ensure_ascii=False), encoding="utf-8")
    return AutoTokenizer.from_pretrained(str(out_dir))


def expand_tokenizer(
    base: PreTrainedTokenizerBase, spec: VocabSpec, pieces: dict[str, list[str]], first_id: int,
    domain: PreTrainedTokenizerBase, out_dir: Path,
) -> tuple[PreTrainedTokenizerBase, dict[str, list[str]]]:
    """Save ``base`` with the new tokens (keys of ``pieces``) in its model from ``first_id``
    on; returns the reloaded tokenizer and every new entry (in id order) with its base pieces.

    ``first_id`` is above every existing id (vocabulary, added tokens and embedding rows), so
    no id moves."""
    state = tokenizer_state(base)
    entries = spec.insert(state["model"], pieces, first_id, tokenizer_state(domain))
    return write_tokenizer(base, state, out_dir), entries


@torch.no_grad()
def mean_init_rows(weight: torch.Tensor, piece_ids: Sequence[Sequence[int]]) -> torch.Tensor:
    """Rows for new tokens: the mean of the given rows of ``weight`` (shape ``[V, d]``).

    Returns a ``[len(piece_ids), d]`` tensor in ``weight``'s dtype (mean computed in fp32).
    """
    if not piece_ids:
        return weight.new_zeros((0, weight.shape[1]))
    return torch.stack([weight[list(ids)].float().mean(0) for ids in piece_ids]).to(weight.dtype)


@torch.no_grad()
def expand_embeddings(
    model: torch.nn.Module, new_ids: Sequence[int], piece_ids: Sequence[Sequence[int]], new_size: int
) -> None:
    """Grow ``model``'s input embeddings to ``new_size`` rows: row ``new_ids[i]`` becomes the
    mean of the base rows ``piece_ids[i]``; every old row is copied bit for bit."""
    old = model.get_input_embeddings().weight.detach().clone()
    new_rows = mean_init_rows(old, piece_ids)
    model.resize_token_embeddings(new_size, mean_resizing=False)
    weight = model.get_input_embeddings().weight
    weight[: old.shape[0]] = old
    weight[list(new_ids)] = new_rows
    if hasattr(model.config, "vocab_size"):
        model.config.vocab_size = new_size


def expand_mlm_bias(bias: torch.Tensor, piece_ids: Sequence[Sequence[int]]) -> torch.Tensor:
    """An MLM decoder bias ``[V]`` grown like the embeddings: new entries are the mean bias of
    their base pieces, so a new token starts with the prior of the pieces it replaces."""
    extra = torch.stack([bias[list(ids)].float().mean() for ids in piece_ids]).to(bias.dtype)
    return torch.cat([bias.detach(), extra])


def masked_lm_with_head(resolved: str) -> torch.nn.Module | None:
    """The checkpoint as ``*ForMaskedLM`` (float32) if it ships MLM head weights, else ``None``."""
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a missing head is the answer we ask for, not a warning
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(resolved, dtype=torch.float32, output_loading_info=True)
    except ValueError:  # no masked-LM class for this architecture
        return None
    finally:
        hf_logging.set_verbosity(verbosity)
    if info["missing_keys"]:  # the head was initialised fresh: the checkpoint has none
        return None
    return model


@dataclass
class ReductionReport:
    """What ``--reduce-to-corpus`` removed (seed 004's language reduction)."""

    rows_before: int
    rows_after: int
    parameters_before: int
    parameters_after: int
    corpus_texts: int

    @property
    def saving(self) -> float:
        return 1 - self.parameters_after / max(self.parameters_before, 1)

    def to_markdown(self) -> str:
        return (f"- reduced to the corpus ({self.corpus_texts:,} texts): embedding rows {self.rows_before:,} → "
                f"**{self.rows_after:,}**; parameters {self.parameters_before:,} → {self.parameters_after:,} "
                f"(**{self.saving:.1%} fewer**)\n")


def _kept_ids(tokenizer: PreTrainedTokenizerBase, state: dict, texts: Sequence[str]) -> list[int]:
    """Ids a reduced vocabulary keeps: those ``texts`` use, specials and added tokens, every
    single-character piece (unseen text still tokenizes without new unknowns) and, for BPE,
    every token a kept token is merged from (the merge chains must stay intact)."""
    model = state["model"]
    if model["type"] not in SPECS:
        raise UnsupportedTokenizer(f"vocabulary reduction supports {', '.join(SPECS)} tokenizers, not {model['type']}")
    by_id = ({i: p for i, (p, _) in enumerate(model["vocab"])} if model["type"] == "Unigram"
             else {i: t for t, i in model["vocab"].items()})
    keep = set(tokenizer.all_special_ids) | {t["id"] for t in state.get("added_tokens", [])}
    for start in range(0, len(texts), 1000):
        for ids in tokenizer(list(texts[start: start + 1000]), add_special_tokens=False)["input_ids"]:
            keep.update(ids)
    prefix = model.get("continuing_subword_prefix") or ""
    keep |= {i for i, t in by_id.items() if len(t.removeprefix(prefix).lstrip("▁")) <= 1}
    if model["type"] == "BPE":
        ids = model["vocab"]
        parts = {ids[a + b]: (ids[a], ids[b]) for a, b in map(_pair, model["merges"]) if a + b in ids}
        todo = list(keep)
        while todo:
            for part in parts.get(todo.pop(), ()):
                if part not in keep:
                    keep.add(part)
                    todo.append(part)
    return sorted(keep)


def _pair(merge: list[str] | str) -> tuple[str, str]:
    """A BPE merge as a pair, from either serialisation (``["a", "b"]`` or ``"a b"``)."""
    a, b = merge if isinstance(merge, list) else merge.split(" ", 1)
    return a, b


def _remap_ids(node: object, new_id: dict[int, int]) -> object:
    """Post-processor state with every special-token id remapped (``ids`` lists of
    TemplateProcessing, ``[token, id]`` pairs of Bert/RobertaProcessing)."""
    if isinstance(node, dict):
        return {k: ([new_id[i] for i in v] if k == "ids" else
                    [v[0], new_id[v[1]]] if k in ("cls", "sep") and isinstance(v, list) else _remap_ids(v, new_id))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_remap_ids(v, new_id) for v in node]
    return node


def reduce_vocabulary(base_model: str, texts: Sequence[str], out_dir: Path) -> ReductionReport:
    """Keep only the vocabulary rows ``texts`` need (see :func:`_kept_ids`); the encoder is
    untouched and every kept row is copied bit for bit. Writes a model that
    ``SentenceTransformer``/``AutoModel`` load, and checks that ``texts`` tokenize to the same
    tokens as before."""
    from sentence_transformers import SentenceTransformer

    if not texts:
        raise ValueError("the reduction corpus is empty: every vocabulary row would go")
    out_dir = Path(out_dir)
    st = SentenceTransformer(resolve_model(base_model), device="cpu")
    transformer, tok = st[0], st[0].tokenizer
    encoder = transformer.auto_model
    state = tokenizer_state(tok)
    old_weight = encoder.get_input_embeddings().weight.detach().clone()
    params_before = sum(p.numel() for p in encoder.parameters())
    kept = [i for i in _kept_ids(tok, state, texts) if i < old_weight.shape[0]]
    new_id = {old: new for new, old in enumerate(kept)}
    model = state["model"]
    if model["type"] == "Unigram":
        model["vocab"] = [entry for i, entry in enumerate(model["vocab"]) if i in new_id]
        if model.get("unk_id") is not None:
            model["unk_id"] = new_id[model["unk_id"]]
    else:
        model["vocab"] = {t: new_id[i] for t, i in model["vocab"].items() if i in new_id}
    if model["type"] == "BPE":
        model["merges"] = [m for m in model["merges"]
                           if all(t in model["vocab"] for t in (*_pair(m), "".join(_pair(m))))]
    for added in state.get("added_tokens", []):
        added["id"] = new_id[added["id"]]
    state["post_processor"] = _remap_ids(state.get("post_processor"), new_id)
    with torch.no_grad():
        encoder.resize_token_embeddings(len(kept), mean_resizing=False)
        encoder.get_input_embeddings().weight.copy_(old_weight[kept])
    config = encoder.config
    config.vocab_size = len(kept)
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id"):
        if isinstance(getattr(config, key, None), int) and getattr(config, key) in new_id:
            setattr(config, key, new_id[getattr(config, key)])
    out_dir.mkdir(parents=True, exist_ok=True)
    reduced = write_tokenizer(tok, state, out_dir)
    sample = list(texts[:: max(1, len(texts) // 200)])
    before, after = tok(sample)["input_ids"], reduced(sample)["input_ids"]
    if [[new_id[i] for i in ids] for ids in before] != after:
        raise RuntimeError("the reduced tokenizer does not reproduce the corpus's tokenization; nothing kept")
    transformer.processor = reduced
    st.save(str(out_dir))
    report = ReductionReport(old_weight.shape[0], len(kept), params_before,
                             sum(p.numel() for p in encoder.parameters()), len(texts))
    log.info("reduced the vocabulary %d -> %d rows (%.1f%% fewer parameters)", report.rows_before,
             report.rows_after, 100 * report.saving)
    return report


DRIFT_MAX_LENGTH = 256
PRUNE_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5)  # the trade-off a pruned stage 1 reports


def select_with_table(spec: VocabSpec, state: dict, candidates: dict[str, list[str]], counts, held, first_id: int,
                      domain_state: dict, cfg: VocabConfig) -> tuple[Selection, list[dict], Selector]:
    """(the selection at ``cfg.min_count`` (and ``cfg.max_tokens``), for every threshold of the
    ladder the tokens added and the held-out fertility they give, the selector), from one climb."""
    selector = Selector(spec, state, counts, first_id, domain_state)
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
    are the expanded encoder's (the decoder is tied to them) and the decoder bias grows consistently."""
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
                        progress: bool) -> VocabReport:
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".reduced-") as reduced_dir:
        reduction = reduce_vocabulary(cfg.base_model, reduce_texts, Path(reduced_dir))
        report = build_expanded_model(texts, out_dir, cfg.model_copy(update={"base_model": reduced_dir}),
                                      progress=progress)
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


def split_heldout(texts: Sequence[str], every: int) -> tuple[list[str], list[str]]:
    """(training texts, held-out texts): every ``every``-th text, from the first, is held out."""
    return [t for i, t in enumerate(texts) if i % every], [t for i, t in enumerate(texts) if not i % every]


def plan_vocabulary(base_tok: PreTrainedTokenizerBase, train: list[str], heldout: list[str], rows: int,
                    cfg: VocabConfig, clock: _Clock) -> VocabPlan:
    """Train the domain tokenizer on ``train`` and select its tokens by their evidence."""
    state = tokenizer_state(base_tok)
    spec = spec_of(state)  # before training: an unsupported kind fails at once
    domain = train_domain_tokenizer(base_tok, train, cfg.vocab_size or len(base_tok), cfg.min_frequency)
    candidates, skipped = candidate_tokens(spec, base_tok, domain)
    clock.lap("domain tokenizer")
    first_id = max(next_free_id(state), rows)  # padded matrices: never reuse a row
    held = word_counts(base_tok, heldout)
    chosen, thresholds, selector = select_with_table(spec, state, candidates, word_counts(base_tok, train), held,
                                                     first_id, tokenizer_state(domain), cfg)
    clock.lap("selection")
    return VocabPlan(spec, state, domain, candidates, skipped, first_id, chosen, thresholds, held, selector)


def _distill(encoder, pooling: str, base_tok, expanded, new_ids: list[int], texts: tuple[list[str], list[str]],
             cfg: VocabConfig, out_dir: Path, progress: bool, clock: _Clock) -> dict | None:
    """The distillation's result when ``cfg.init`` asks for one (the rows of ``new_ids`` hold the
    mean of their pieces on entry and the distilled rows on return), else ``None``."""
    if cfg.init != "distill":
        return None
    fingerprint = hashlib.sha256(json.dumps([new_ids, expanded.convert_ids_to_tokens(new_ids),
                                             cfg.model_dump(mode="json")]).encode()).hexdigest()
    result = distill_rows(encoder, pooling, base_tok, expanded, new_ids, *texts, cfg.distill, out_dir, fingerprint,
                          progress=progress).to_dict()
    clock.lap("distillation")
    return result


def prune_selection(plan: VocabPlan, costs: dict[str, dict], share: float,
                    cfg: VocabConfig) -> tuple[Selection, list[str]]:
    """(the selection without the ``share`` of its tokens that cost the most per piece saved,
    settled again; those tokens, costliest first). ``costs``: token → :func:`token_costs`'s
    entry; a token with no measured cost is kept. Deterministic: ties break on the token."""
    chosen = plan.chosen
    ranked = sorted((t for t in chosen.tokens if t in costs), key=lambda t: (-costs[t]["cost"], t))
    drop = ranked[: round(share * len(chosen.tokens))]
    start = Selection({t: p for t, p in chosen.tokens.items() if t not in set(drop)},
                      {**chosen.rejected, **dict.fromkeys(drop, "costly")},
                      {**chosen.rejected_uses, **{t: chosen.uses[t] for t in drop}}, {}, {}, chosen.iterations,
                      chosen.min_count)
    return plan.selector.settle(start, cfg.min_count, cfg.max_tokens), drop


def _pruned_model(plan: VocabPlan, selection: Selection, rows: dict[str, torch.Tensor], encoder, base_tok,
                  out_dir: Path) -> tuple:
    """The tokenizer of ``selection`` (saved to ``out_dir``) and the encoder's rows for it: a kept
    token keeps its row in ``rows``; ids stay contiguous from ``plan.first_id``. Returns
    (tokenizer, entries, new ids, piece ids)."""
    expanded, entries = expand_tokenizer(base_tok, plan.spec, selection.tokens, plan.first_id, plan.domain, out_dir)
    new_ids = expanded.convert_tokens_to_ids(list(entries))
    piece_ids = [[plan.spec.vocab[p] for p in pieces] for pieces in entries.values()]
    encoder.resize_token_embeddings(plan.first_id, mean_resizing=False)  # the base rows only
    expand_embeddings(encoder, new_ids, piece_ids, plan.first_id + len(entries))
    with torch.no_grad():
        weight = encoder.get_input_embeddings().weight
        for token, i in zip(entries, new_ids, strict=True):
            if token in rows:  # else (a BPE merge intermediate new to this chain): the mean of its pieces
                weight[i] = rows[token]
    return expanded, entries, new_ids, piece_ids


def _prune(plan: VocabPlan, encoder, pooling: str, base_tok, expanded, entries: dict[str, list[str]],
           train: list[str], heldout: list[str], length: int, cfg: VocabConfig, out_dir: Path) -> tuple:
    """Drop the costliest tokens (:func:`prune_selection`) and rebuild the tokenizer and the rows
    (:func:`_pruned_model`); ``plan.chosen`` becomes the pruned selection. Every share of
    :data:`PRUNE_SHARES` is built and measured too (tokens, held-out fertility, drift), so the
    report shows the trade-off. Returns (tokenizer, entries, new ids, piece ids, the pruning's
    record for the report: its ``trade_off`` holds the chosen share's drift)."""
    new_ids = expanded.convert_tokens_to_ids(list(entries))
    measured = token_costs(encoder, pooling, base_tok, expanded, train, cfg.distill.max_length, plan.first_id,
                           cfg.prune_sentences, cfg.distill.seed)
    costs = {expanded.convert_ids_to_tokens(t): c for t, c in measured.items()}
    kept_before = len(entries)
    fertility_before = fertility_of(Segmenter(tokenizer_state(expanded)), plan.held)[1]
    weight = encoder.get_input_embeddings().weight
    rows = dict(zip(entries, weight.detach()[new_ids].clone(), strict=True))

    def point(share: float, tok, added: dict) -> dict:
        return {"share": share, "tokens": len(added),
                "fertility": fertility_of(Segmenter(tokenizer_state(tok)), plan.held)[1],
                "drift": drift(encoder, pooling, base_tok, tok, heldout, length)}

    trade_off = []
    for share in sorted(set(PRUNE_SHARES) - {cfg.prune}):  # the chosen share last: its rows stay in the encoder
        with tempfile.TemporaryDirectory() as tmp:
            tok, added, *_ = _pruned_model(plan, prune_selection(plan, costs, share, cfg)[0], rows, encoder,
                                           base_tok, Path(tmp))
            trade_off.append(point(share, tok, added))
    selection, dropped = prune_selection(plan, costs, cfg.prune, cfg)
    expanded, entries, new_ids, piece_ids = _pruned_model(plan, selection, rows, encoder, base_tok, out_dir)
    trade_off = sorted([*trade_off, point(cfg.prune, expanded, entries)], key=lambda p: p["share"])
    record = {"share": cfg.prune, "sentences_per_token": cfg.prune_sentences, "measured": len(costs),
              "dropped": len(dropped), "tokens_before": kept_before, "fertility_before": fertility_before,
              "settled_out": len(plan.chosen.tokens) - len(dropped) - len(selection.tokens),
              "costliest": [{"token": t, **costs[t]} for t in dropped[:15]],
              "kept_max_cost": max((costs[t]["cost"] for t in selection.tokens if t in costs), default=None),
              "trade_off": trade_off}
    plan.chosen = selection
    return expanded, entries, new_ids, piece_ids, record


def _rows(plan: VocabPlan, encoder, pooling: str, base_tok, expanded, entries: dict[str, list[str]],
          piece_ids: list[list[int]], texts: tuple[list[str], list[str]], cfg: VocabConfig, out_dir: Path,
          progress: bool, clock: _Clock) -> tuple[tuple, dict | None, tuple]:
    """Initialise the new rows, prune when ``cfg.prune`` says so, measure the drift. Returns
    ((drift with mean rows, distillation result, final drift, drift per token), the pruning's
    record or ``None``, (tokenizer, entries, new ids, piece ids) as stage 1 saves them)."""
    new_ids = expanded.convert_tokens_to_ids(list(entries))
    if not entries:
        return (None, None, None, None), None, (expanded, entries, new_ids, piece_ids)
    heldout = texts[1][: cfg.distill.heldout_texts]
    length = min(DRIFT_MAX_LENGTH, max_positions(encoder.config))
    before = drift(encoder, pooling, base_tok, expanded, heldout, length)
    distilled = _distill(encoder, pooling, base_tok, expanded, new_ids, texts, cfg, out_dir, progress, clock)
    pruned = None
    if cfg.prune:
        unpruned = drift(encoder, pooling, base_tok, expanded, heldout, length) if distilled else None
        expanded, entries, new_ids, piece_ids, pruned = _prune(plan, encoder, pooling, base_tok, expanded, entries,
                                                               texts[0], heldout, length, cfg, out_dir)
        pruned["drift_before"] = unpruned
        after = next(p["drift"] for p in pruned["trade_off"] if p["share"] == cfg.prune)
        clock.lap("pruning")
    else:
        after = drift(encoder, pooling, base_tok, expanded, heldout, length) if new_ids and distilled else None
    per_token = token_drift(encoder, pooling, base_tok, expanded, heldout, length, plan.first_id)
    clock.lap("drift per token")
    return (before, distilled, after, per_token), pruned, (expanded, entries, new_ids, piece_ids)


def _report(plan: VocabPlan, base_tok, expanded, entries: dict[str, list[str]], cfg: VocabConfig,
            rows: tuple[dict | None, ...], pruned: dict | None, clock: _Clock) -> VocabReport:
    chosen = plan.chosen
    words, fert_before, single_before = fertility_of(Segmenter(plan.state), plan.held)
    _, fert_after, single_after = fertility_of(Segmenter(tokenizer_state(expanded)), plan.held)
    by_saving = sorted(chosen.tokens, key=lambda t: (-chosen.saved[t], t))
    drift_mean, distilled, drift_after, per_token = rows
    return VocabReport(
        base_vocab_size=len(base_tok), domain_tokenizer_size=len(plan.domain), candidates=len(plan.candidates),
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
        distill=distilled, drift_mean_init=drift_mean, drift=drift_after or drift_mean, token_drift=per_token,
        pruned=pruned, seconds=clock.laps)


def build_expanded_model(texts: Sequence[str], out_dir: Path, cfg: VocabConfig,
                         reduce_texts: Sequence[str] | None = None, progress: bool = False) -> VocabReport:
    """Stage 1 end to end: train the domain tokenizer, select its tokens by evidence, expand the
    tokenizer and the embeddings, initialise the new rows (mean of pieces, then distilled),
    save, report.

    ``out_dir`` receives a model that ``SentenceTransformer(out_dir)`` and
    ``AutoModel``/``AutoTokenizer`` load directly, plus V_D and the report
    (:mod:`mosaic_core.modeldir`). With ``reduce_texts`` the base vocabulary is first reduced
    to the rows those texts use (:func:`reduce_vocabulary`), then expanded.
    """
    from sentence_transformers import SentenceTransformer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if reduce_texts is not None:
        return _reduce_then_expand(texts, out_dir, cfg, reduce_texts, progress)
    clock = _Clock()
    st = SentenceTransformer(resolve_model(cfg.base_model), device="cpu")
    transformer, base_tok = st[0], st[0].tokenizer
    encoder = transformer.auto_model
    train, heldout = split_heldout(texts, cfg.heldout_every)
    if not train:
        raise ValueError("the domain corpus is empty: nothing to train a tokenizer on")
    plan = plan_vocabulary(base_tok, train, heldout, encoder.get_input_embeddings().weight.shape[0], cfg, clock)
    expanded, entries = expand_tokenizer(base_tok, plan.spec, plan.chosen.tokens, plan.first_id, plan.domain,
                                         out_dir)
    new_ids = expanded.convert_tokens_to_ids(list(entries))
    if new_ids != list(range(plan.first_id, plan.first_id + len(entries))):
        raise RuntimeError(f"the saved tokenizer does not give the new tokens ids {plan.first_id}… in order")
    piece_ids = [[plan.spec.vocab[p] for p in pieces] for pieces in entries.values()]
    expand_embeddings(encoder, new_ids, piece_ids, plan.first_id + len(entries))
    pooling = read_st_pooling(resolve_model(cfg.base_model))[0] or "mean"
    rows, pruned, (expanded, entries, new_ids, piece_ids) = _rows(
        plan, encoder, pooling, base_tok, expanded, entries, piece_ids, (train, heldout), cfg, out_dir, progress,
        clock)
    transformer.processor = expanded  # sentence-transformers 6: the tokenizer is its processor
    st.save(str(out_dir))
    if not _save_mlm_head(cfg.base_model, out_dir, encoder, new_ids, piece_ids) and cfg.model_kind == "sparse":
        log.warning("stage 1: %s ships no masked-LM head, so the sparse model's head starts random: train it "
                    "first (the warmup preset's mlm stage) or start from a model with a head", cfg.base_model)
    if cfg.model_kind == "sparse":
        convert_to_sparse(out_dir)
    write_domain_ids(out_dir, new_ids)
    clock.lap("save")
    report = _report(plan, base_tok, expanded, entries, cfg, rows, pruned, clock)
    write_vocab_report(out_dir, report.to_json(), report.to_markdown())
    write_card(out_dir, render(facts(str(out_dir), "its domain corpus")))
    log.info("stage 1: added %d of %d candidate tokens; fertility %.3f -> %.3f", report.tokens_added,
             report.candidates, report.fertility_before, report.fertility_after)
    return report
