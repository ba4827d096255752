"""Stage 1's tokenizers: the domain tokenizer trained on the corpus, its candidate tokens, and
the base tokenizer's model with new tokens inserted, for each kind (WordPiece, BPE, Unigram);
steps 1-3 of :mod:`mosaic_core.vocab.build`."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from mosaic_core.vocab.selection import word_counts

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
    # The Unigram trainer sums floats in hash-map order, so the same corpus gives scores that
    # differ in their last bits from run to run (~1e-11); rounded, the pieces inserted are the same.
    DECIMALS = 4

    @classmethod
    def from_state(cls, state: dict) -> UnigramSpec:
        pieces = state["model"]["vocab"]
        return cls({p: i for i, (p, _) in enumerate(pieces)}, [s for _, s in pieces], state["model"].get("unk_id"),
                   _model_of(state))

    def base_pieces(self, token: str) -> list[str] | None:
        found = self.model.tokenize(token)
        return None if any(t.id == self.unk_id for t in found) else [t.value for t in found]

    def insert(self, model: dict, pieces: dict[str, list[str]], first_id: int, domain: dict) -> dict[str, list[str]]:
        """Append the tokens (keys of ``pieces``) as pieces scored ``max(domain score, base split score + margin)`` (the
        domain score rounded to ``DECIMALS``):
        never below the base segmentation they replace, so the Viterbi search picks a new
        piece at least where its base pieces would have stood."""
        if first_id != len(model["vocab"]):
            raise UnsupportedTokenizer(f"Unigram ids are positions: new pieces must start at {len(model['vocab'])}, "
                                       f"not {first_id} (the embedding matrix has rows beyond the tokenizer)")
        domain_scores = {t: round(score, self.DECIMALS) for t, score in domain["model"]["vocab"]}
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


def _trainer_affixes(state: dict) -> tuple[str | None, str | None]:
    """(continuing-subword prefix, end-of-word suffix) the trainer that ``train_new_from_iterator``
    builds for a tokenizer state marks pieces with: WordPiece's trainer always uses ``##`` (it
    is not passed the model's prefix); BPE's gets the model's own."""
    model = state["model"]
    if model["type"] == "WordPiece":
        return "##", None
    if model["type"] == "BPE":
        return model.get("continuing_subword_prefix"), model.get("end_of_word_suffix")
    return None, None


def marked_characters(state: dict, words: Iterable[str]) -> list[str]:
    """The single-character pieces the BPE/WordPiece trainer adds for ``words`` (pre-tokenized,
    as the tokenizer's normalizer and pre-tokenizer give them) besides the characters
    themselves: each character after a word's first with the continuing-subword prefix
    (``##a``), each last one with the end-of-word suffix; sorted (by code point).

    The trainer numbers these as it meets them while iterating a hash map, whose order
    changes from process to process, and breaks ties between equally frequent merges by
    those numbers: the same corpus then gives a different vocabulary from run to run
    (huggingface/tokenizers#1794). Declared up front, in this order, they get the same ids
    every run and the training is a function of the corpus."""
    prefix, suffix = _trainer_affixes(state)
    if not prefix and not suffix:
        return []
    marked = set()
    for word in words:
        last = len(word) - 1
        for i, ch in enumerate(word):
            piece = (prefix if prefix and i else "") + ch + (suffix if suffix and i == last else "")
            if piece != ch:
                marked.add(piece)
    return sorted(marked)


def train_domain_tokenizer(
    base: PreTrainedTokenizerBase, texts: Iterable[str], vocab_size: int, min_frequency: int,
    words: Iterable[str] | None = None,
) -> PreTrainedTokenizerBase:
    """A tokenizer of the base's kind, normalizer and pre-tokenizer, trained on ``texts``:
    the same vocabulary (tokens and ids) whenever it is trained on the same texts.

    ``words``: the distinct words of ``texts`` as the base tokenizer pre-tokenizes them
    (computed when not given). Their marked characters (:func:`marked_characters`) are given
    to the trainer ahead of training, as special tokens so that they come first and in a
    fixed order, then turned back into plain vocabulary entries: the trainer would have added
    exactly these entries itself, in an order that changes between runs."""
    texts = texts if isinstance(texts, list) else list(texts)
    state = tokenizer_state(base)
    if words is None and any(_trainer_affixes(state)):
        words = word_counts(base, texts)
    marked = marked_characters(state, words or ())
    domain = base.train_new_from_iterator(texts, vocab_size=vocab_size, min_frequency=min_frequency,
                                          new_special_tokens=marked or None)
    if not marked:
        return domain
    trained = tokenizer_state(domain)
    drop = set(marked)
    trained["added_tokens"] = [t for t in trained["added_tokens"] if t["content"] not in drop]
    named = {k: v for k, v in domain.special_tokens_map.items() if isinstance(v, str)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(trained)), **named)


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
