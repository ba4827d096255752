"""``--reduce-to-corpus``: keep only the base vocabulary rows a corpus uses, plus specials and
single characters (seed 004's language reduction)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from mosaic_core.modeling.refs import resolve_model
from mosaic_core.vocab.tokenizers import SPECS, UnsupportedTokenizer, tokenizer_state, write_tokenizer

log = logging.getLogger(__name__)

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
