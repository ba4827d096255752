"""Vocabulary-acquisition diagnostics (seed 003): has the model learned a term?

For one term: how the base and the adapted tokenizers split it; the MLM logit and rank the
model gives each of its pieces where the term occurs in real sentences (each piece masked in
turn, ranked against the whole vocabulary); and the nearest neighbours of its embedding row
(the mean of its pieces' rows when it is not one token). A term that is one token, ranks near
the top where it occurs and sits among related words has been acquired; a term with a
fresh-looking row and a low rank has not, whatever the retrieval scores say.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import torch

from mosaic_core.vocab.windows import split_sentences


@dataclass
class TermDiagnosis:
    term: str
    pieces: list[str]
    base_pieces: list[str] | None
    single_token: bool
    in_domain_vocab: bool
    head: str
    occurrences: list[dict] = field(default_factory=list)
    neighbours: list[tuple[str, float]] = field(default_factory=list)
    row: str = ""
    activation: dict | None = None
    """A sparse (SPLADE) model only: the term's weight in the representations of the sentences
    that contain it (:func:`mosaic_core.modeling.sparse.term_activation`)."""

    @property
    def mean_logit(self) -> float | None:
        return statistics.fmean(o["logit"] for o in self.occurrences) if self.occurrences else None

    @property
    def median_rank(self) -> float | None:
        return statistics.median(o["rank"] for o in self.occurrences) if self.occurrences else None

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "mean_logit": self.mean_logit, "median_rank": self.median_rank}, indent=2)

    def to_text(self) -> str:
        size = "one token" if self.single_token else f"{len(self.pieces)} pieces"
        lines = [f"term: {self.term!r}",
                 f"  adapted tokenizer: {' '.join(self.pieces)}  ({size}"
                 f"{', in the domain vocabulary V_D' if self.in_domain_vocab else ''})"]
        if self.base_pieces is not None:
            lines.append(f"  base tokenizer:    {' '.join(self.base_pieces)}")
        lines.append(f"  MLM head: {self.head}")
        if self.occurrences:
            lines.append(f"  MLM at {len(self.occurrences)} masked occurrence(s): mean logit {self.mean_logit:.3f}, "
                         f"median rank {self.median_rank:g} (1 = the model's top prediction)")
            for o in self.occurrences[:10]:
                lines.append(f"    {o['piece']:>14}  logit {o['logit']:7.3f}  rank {o['rank']:>6}  top: "
                             f"{', '.join(o['top'])}  | {o['context']}")
        else:
            lines.append("  MLM: the term occurs in no given sentence (pass --corpus or --text)")
        if self.activation is not None and self.activation["mean_weight"] is not None:
            a = self.activation
            lines.append(f"  SPLADE representation of the {a['texts']} sentence(s): mean weight of "
                         f"{' '.join(a['pieces'])} {a['mean_weight']:.3f}; every piece fires in {a['fires']:.0%}")
        lines.append(f"  nearest neighbours of its {self.row}: "
                     + ", ".join(f"{t} ({c:.2f})" for t, c in self.neighbours))
        return "\n".join(lines)


def term_sentences(texts: Iterable[str], term: str, limit: int) -> list[str]:
    """Up to ``limit`` sentences of ``texts`` that contain ``term`` as a word (case-insensitive)."""
    return terms_sentences(texts, [term], limit)[term]


def terms_sentences(texts: Iterable[str], terms: list[str], limit: int) -> dict[str, list[str]]:
    """Up to ``limit`` sentences per term of ``terms`` that contain it as a word (case-insensitive),
    in one pass over ``texts`` (stopping once every term has its ``limit``)."""
    patterns = {t: re.compile(rf"(?<!\w){re.escape(t)}(?!\w)", re.IGNORECASE) for t in terms}
    found: dict[str, list[str]] = {t: [] for t in terms}
    for text in texts:
        open_terms = [t for t in terms if len(found[t]) < limit and patterns[t].search(text)]
        for sentence in split_sentences([text]) if open_terms else ():
            for t in open_terms:
                if len(found[t]) < limit and patterns[t].search(sentence):
                    found[t].append(sentence)
        if all(len(v) >= limit for v in found.values()):
            break
    return found


def _occurrence_positions(tokenizer, sentence: str, term: str, max_length: int) -> tuple[list[int], list[int]]:
    """(input ids, positions of the term's pieces) of ``sentence``."""
    enc = tokenizer(sentence, return_offsets_mapping=True, truncation=True, max_length=max_length)
    spans = [m.span() for m in re.finditer(rf"(?<!\w){re.escape(term)}(?!\w)", sentence, re.IGNORECASE)]
    positions = [i for i, (a, b) in enumerate(enc["offset_mapping"])
                 if b > a and any(s <= a and b <= e for s, e in spans)]
    return enc["input_ids"], positions


def diagnose_term(model_path: str, term: str, sentences: list[str], base_model: str | None = None,
                  neighbours: int = 10, max_length: int = 256) -> TermDiagnosis:
    """Diagnose ``term`` for the model at ``model_path`` (a stage output, or any model)."""
    return diagnose_terms(model_path, {term: sentences}, base_model, neighbours, max_length)[0]


@torch.no_grad()
def diagnose_terms(model_path: str, terms: dict[str, list[str]], base_model: str | None = None,
                   neighbours: int = 10, max_length: int = 256) -> list[TermDiagnosis]:
    """Diagnose each term of ``terms`` (term → sentences that use it) for the model at
    ``model_path``, loaded once; in the order of ``terms``."""
    from transformers import AutoTokenizer

    from mosaic_core.modeling.dual_encoder import build_model
    from mosaic_core.modeling.modeldir import has_trained_head, read_domain_ids
    from mosaic_core.modeling.refs import resolve_model
    from mosaic_core.modeling.sparse import is_sparse_model, sparse_encoder

    resolved = resolve_model(model_path)
    tokenizer = AutoTokenizer.from_pretrained(resolved)
    model, from_checkpoint = build_model(resolved)
    model.eval()
    head = ("trained by a MOSAIC stage" if has_trained_head(resolved) else
            "the checkpoint's own" if from_checkpoint else
            "none in the checkpoint: initialised fresh, so logits and ranks say nothing yet")
    domain_ids = read_domain_ids(resolved)
    domain = set(domain_ids.tolist()) if domain_ids is not None else set()
    base = AutoTokenizer.from_pretrained(resolve_model(base_model)) if base_model else None
    sparse = sparse_encoder(resolved) if is_sparse_model(resolved) else None
    return [_diagnose(model, tokenizer, head, domain, base, sparse, term, sentences, neighbours, max_length)
            for term, sentences in terms.items()]


def _diagnose(model, tokenizer, head: str, domain: set[int], base, sparse, term: str, sentences: list[str],
              neighbours: int, max_length: int) -> TermDiagnosis:
    from mosaic_core.modeling.sparse import term_activation

    ids = tokenizer(term, add_special_tokens=False)["input_ids"]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    base_pieces = base.tokenize(term) if base is not None else None
    activation = term_activation(sparse, term, sentences) if sparse is not None else None
    diagnosis = TermDiagnosis(term, pieces, base_pieces, len(ids) == 1, len(ids) == 1 and ids[0] in domain, head,
                              activation=activation)

    embeddings = model.embeddings.detach().float()
    for sentence in sentences:
        input_ids, positions = _occurrence_positions(tokenizer, sentence, term, max_length)
        if not positions:
            continue
        batch = torch.tensor([input_ids] * len(positions))
        for row, pos in enumerate(positions):
            batch[row, pos] = tokenizer.mask_token_id
        hidden = model.encoder(input_ids=batch, attention_mask=torch.ones_like(batch)).last_hidden_state
        states = model.head.transform(hidden[torch.arange(len(positions)), positions]).float()
        logits = states @ embeddings.T + model.head.bias.float()
        for row, pos in enumerate(positions):
            true = input_ids[pos]
            value = logits[row, true].item()
            diagnosis.occurrences.append({
                "piece": tokenizer.convert_ids_to_tokens(true), "logit": value,
                "rank": int((logits[row] > value).sum().item()) + 1,
                "top": tokenizer.convert_ids_to_tokens(logits[row].topk(3).indices.tolist()),
                "context": sentence if len(sentence) <= 100 else sentence[:97] + "..."})

    row = embeddings[ids].mean(0)
    diagnosis.row = "embedding row" if len(ids) == 1 else f"mean of its {len(ids)} piece rows"
    cosine = torch.nn.functional.normalize(embeddings, dim=1) @ torch.nn.functional.normalize(row, dim=0)
    cosine[list(set(ids) | set(tokenizer.all_special_ids))] = -2.0
    top = cosine.topk(min(neighbours, cosine.numel()))
    diagnosis.neighbours = [(tokenizer.convert_ids_to_tokens(i), round(c, 4))
                            for i, c in zip(top.indices.tolist(), top.values.tolist(), strict=True)]
    return diagnosis
