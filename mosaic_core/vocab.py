"""Stage 1: domain tokenizer training and vocabulary expansion (METHOD.md, Stage 1).

1. Train a tokenizer of the base tokenizer's own kind, normalizer and pre-tokenizer on the
   domain corpus (``train_new_from_iterator`` keeps all three).
2. New tokens = its tokens missing from the base vocabulary, minus specials and minus any
   token the base tokenizer can only express with its unknown token.
3. Insert them into the base tokenizer's *model* vocabulary, so the real WordPiece
   algorithm uses them — a continuation piece ``##xyz`` is matched mid-word, which an
   "added token" (whole-word match only) never is.
4. Grow the embedding matrix; each new row is the mean of the base rows of the pieces the
   *base* tokenizer splits the token into (``##xyz`` split as it occurs inside a word).
   Old rows stay bit-identical; the encoder is untouched.

The new token ids are the domain vocabulary V_D used by the domain-restricted MLM of stage 2.
Only WordPiece (BERT-family) tokenizers are supported so far; other kinds fail with a clear
error instead of producing a silently wrong tokenizer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

log = logging.getLogger(__name__)


class UnsupportedTokenizer(ValueError):
    """The base tokenizer's model kind cannot be expanded (yet)."""


@dataclass(frozen=True)
class WordPieceSpec:
    """What the WordPiece algorithm of a tokenizer needs: its vocabulary and conventions."""

    vocab: dict[str, int]
    prefix: str
    unk_token: str
    max_chars: int

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase) -> WordPieceSpec:
        model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
        if model["type"] != "WordPiece":
            raise UnsupportedTokenizer(
                f"vocabulary expansion supports WordPiece (BERT-family) tokenizers; this one is "
                f"{model['type']}. Use a BERT-family base model, or leave out the vocab stage."
            )
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


@dataclass
class VocabReport:
    """What stage 1 did, with the numbers a person checks first."""

    base_vocab_size: int
    domain_tokenizer_size: int
    tokens_added: int
    skipped_unknown: int
    first_new_id: int
    examples: list[dict] = field(default_factory=list)
    heldout_words: int = 0
    fertility_before: float = 0.0
    fertility_after: float = 0.0
    single_token_share_before: float = 0.0
    single_token_share_after: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def to_markdown(self) -> str:
        rows = "\n".join(f"| `{e['token']}` | {' '.join(e['base_pieces'])} |" for e in self.examples[:25])
        return (
            "# Vocabulary expansion\n\n"
            f"- base vocabulary: {self.base_vocab_size:,}; domain tokenizer: {self.domain_tokenizer_size:,}\n"
            f"- tokens added (V_D): **{self.tokens_added:,}** (ids {self.first_new_id:,}–"
            f"{self.first_new_id + self.tokens_added - 1:,}); skipped as [UNK]-only: {self.skipped_unknown}\n"
            f"- held-out words: {self.heldout_words:,}; fertility (pieces/word) "
            f"{self.fertility_before:.3f} → **{self.fertility_after:.3f}**; single-token words "
            f"{self.single_token_share_before:.1%} → **{self.single_token_share_after:.1%}**\n\n"
            "| new token | base pieces (mean-initialised from) |\n| --- | --- |\n" + rows + "\n"
        )


def train_domain_tokenizer(
    base: PreTrainedTokenizerBase, texts: Iterable[str], vocab_size: int, min_frequency: int
) -> PreTrainedTokenizerBase:
    """A tokenizer of the base's kind, normalizer and pre-tokenizer, trained on ``texts``."""
    WordPieceSpec.of(base)  # fail early, before training, on unsupported kinds
    return base.train_new_from_iterator(texts, vocab_size=vocab_size, min_frequency=min_frequency)


def select_new_tokens(
    base: PreTrainedTokenizerBase, domain: PreTrainedTokenizerBase
) -> tuple[list[str], dict[str, list[str]], int]:
    """(new tokens in domain-id order, their base pieces, count skipped as UNK-only)."""
    spec = WordPieceSpec.of(base)
    specials = set(domain.all_special_tokens) | set(base.all_special_tokens)
    new, pieces, skipped = [], {}, 0
    for token, _ in sorted(domain.get_vocab().items(), key=lambda kv: kv[1]):
        if token in spec.vocab or token in specials or token == spec.prefix:
            continue
        split = spec.base_pieces(token)
        if split is None:
            skipped += 1
            continue
        new.append(token)
        pieces[token] = split
    return new, pieces, skipped


def expand_tokenizer(base: PreTrainedTokenizerBase, tokens: Sequence[str], out_dir: Path) -> PreTrainedTokenizerBase:
    """Save ``base`` with ``tokens`` appended to its WordPiece vocabulary; return it reloaded.

    New ids start after every existing id (vocabulary and added tokens alike), so no id moves.
    """
    state = json.loads(base.backend_tokenizer.to_str())
    vocab: dict[str, int] = state["model"]["vocab"]
    next_id = max([*vocab.values(), *(t["id"] for t in state.get("added_tokens", []))]) + 1
    for offset, token in enumerate(tokens):
        vocab[token] = next_id + offset
    base.save_pretrained(out_dir)
    (out_dir / "tokenizer.json").write_text(json.dumps(state, ensure_ascii=False))
    vocab_txt = out_dir / "vocab.txt"
    if vocab_txt.exists():  # keep a slow-tokenizer vocabulary consistent with tokenizer.json
        by_id = sorted(vocab.items(), key=lambda kv: kv[1])
        if [i for _, i in by_id] != list(range(len(by_id))):
            raise UnsupportedTokenizer("vocab.txt needs contiguous ids; this vocabulary has gaps")
        vocab_txt.write_text("".join(t + "\n" for t, _ in by_id), encoding="utf-8")
    return AutoTokenizer.from_pretrained(str(out_dir))


@torch.no_grad()
def mean_init_rows(weight: torch.Tensor, piece_ids: Sequence[Sequence[int]]) -> torch.Tensor:
    """Rows for new tokens: the mean of the given rows of ``weight`` (shape ``[V, d]``).

    Returns a ``[len(piece_ids), d]`` tensor in ``weight``'s dtype (mean computed in fp32).
    """
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
    """The checkpoint as ``*ForMaskedLM`` if it ships MLM head weights, else ``None``."""
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a missing head is the answer we ask for, not a warning
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(resolved, output_loading_info=True)
    except ValueError:  # no masked-LM class for this architecture
        return None
    finally:
        hf_logging.set_verbosity(verbosity)
    if info["missing_keys"]:  # the head was initialised fresh: the checkpoint has none
        return None
    return model


def fertility(tokenizer: PreTrainedTokenizerBase, texts: Iterable[str]) -> tuple[int, float, float]:
    """(words, pieces per word, share of words that are a single piece) over ``texts``,
    words as the tokenizer's own normalizer + pre-tokenizer define them."""
    backend = tokenizer.backend_tokenizer
    words = pieces = single = 0
    for text in texts:
        norm = backend.normalizer.normalize_str(text) if backend.normalizer else text
        for word, _ in backend.pre_tokenizer.pre_tokenize_str(norm):
            n = len(backend.model.tokenize(word))
            words += 1
            pieces += n
            single += n == 1
    return words, pieces / max(words, 1), single / max(words, 1)


def build_expanded_model(
    base_model: str,
    texts: Sequence[str],
    out_dir: Path,
    vocab_size: int | None = None,
    min_frequency: int = 2,
    heldout_every: int = 20,
) -> VocabReport:
    """Stage 1 end to end: train, select, expand tokenizer and embeddings, save, report.

    ``out_dir`` receives a model that ``SentenceTransformer(out_dir)`` and
    ``AutoModel``/``AutoTokenizer`` load directly, plus ``domain_token_ids.json`` (V_D),
    ``vocab_report.json`` and ``vocab_report.md``.
    """
    from sentence_transformers import SentenceTransformer

    from mosaic_core.models import resolve_model

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    st = SentenceTransformer(resolve_model(base_model), device="cpu")
    transformer = st[0]
    base_tok = transformer.tokenizer
    train = [t for i, t in enumerate(texts) if i % heldout_every]
    heldout = [t for i, t in enumerate(texts) if not i % heldout_every]
    if not train:
        raise ValueError("the domain corpus is empty: nothing to train a tokenizer on")
    domain = train_domain_tokenizer(base_tok, train, vocab_size or len(base_tok), min_frequency)
    tokens, pieces, skipped = select_new_tokens(base_tok, domain)
    spec = WordPieceSpec.of(base_tok)
    expanded = expand_tokenizer(base_tok, tokens, out_dir)
    new_ids = expanded.convert_tokens_to_ids(tokens)
    new_size = max([len(expanded), *(i + 1 for i in new_ids)])
    piece_ids = [[spec.vocab[p] for p in pieces[t]] for t in tokens]
    expand_embeddings(transformer.auto_model, new_ids, piece_ids, new_size)
    transformer.processor = expanded  # sentence-transformers 6: the tokenizer is its processor
    st.save(str(out_dir))
    mlm = masked_lm_with_head(resolve_model(base_model))
    if mlm is not None:
        # Keep the checkpoint's MLM head for stage 2: embeddings grown as above (the decoder
        # is tied to them) and the decoder bias grown consistently; AutoModel and
        # SentenceTransformer load the encoder from this checkpoint as before.
        old_bias = mlm.get_output_embeddings().bias.detach().clone()
        expand_embeddings(mlm, new_ids, piece_ids, new_size)
        with torch.no_grad():
            bias = mlm.get_output_embeddings().bias
            bias[: old_bias.shape[0]] = old_bias
            bias[new_ids] = expand_mlm_bias(old_bias, piece_ids)[old_bias.shape[0]:]
        mlm.save_pretrained(out_dir)
    (out_dir / "domain_token_ids.json").write_text(json.dumps(new_ids))

    words, fert_before, single_before = fertility(base_tok, heldout)
    _, fert_after, single_after = fertility(expanded, heldout)
    report = VocabReport(
        base_vocab_size=len(base_tok),
        domain_tokenizer_size=len(domain),
        tokens_added=len(tokens),
        skipped_unknown=skipped,
        first_new_id=new_ids[0] if new_ids else len(base_tok),
        examples=[{"token": t, "base_pieces": pieces[t]} for t in tokens[:: max(1, len(tokens) // 25)]],
        heldout_words=words,
        fertility_before=fert_before,
        fertility_after=fert_after,
        single_token_share_before=single_before,
        single_token_share_after=single_after,
    )
    (out_dir / "vocab_report.json").write_text(report.to_json())
    (out_dir / "vocab_report.md").write_text(report.to_markdown())
    log.info("stage 1: added %d tokens; fertility %.3f -> %.3f", len(tokens), fert_before, fert_after)
    return report
