"""Query and document prompts: the prefixes a base model expects before what it encodes.

Many embedding models are trained with one: nomic-embed-text ``search_query: `` /
``search_document: ``, e5 ``query: `` / ``passage: ``, bge an instruction before queries. A
model declares them in its sentence-transformers config (``config_sentence_transformers.json``,
``prompts``), under names that vary; :func:`declared_prompts` reads them as one
:class:`Prompts`, a config's ``prompts:`` section overrides them, and every place MOSAIC
encodes a query or a document (the consistency filter, hard-negative mining, training,
validation, evaluation) prefixes them. Every model MOSAIC writes declares the prompts it was
trained with under ``query`` and ``document`` (:func:`declare_prompts`), the names
sentence-transformers' ``encode(..., prompt_name=...)`` and mteb look up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mosaic_core.files import replacing

ST_CONFIG = "config_sentence_transformers.json"
QUERY_NAMES = ("query", "search_query", "queries", "q")
DOCUMENT_NAMES = ("document", "passage", "search_document", "documents", "corpus", "doc", "passages")
Kind = Literal["query", "document"]


@dataclass(frozen=True)
class Prompts:
    """The prefix of each query and of each document ("" for none)."""

    query: str = ""
    document: str = ""

    def __bool__(self) -> bool:
        return bool(self.query or self.document)

    def prefix(self, kind: Kind | None) -> str:
        return {"query": self.query, "document": self.document}.get(kind or "", "")

    def apply(self, texts: list[str], kind: Kind | None) -> list[str]:
        """``texts`` with the prompt of ``kind`` in front (unchanged for ``None`` or no prompt)."""
        prefix = self.prefix(kind)
        return [prefix + t for t in texts] if prefix else list(texts)

    def as_dict(self) -> dict[str, str]:
        return {"query": self.query, "document": self.document}


def _st_config(model_dir: str | Path) -> dict:
    path = Path(model_dir) / ST_CONFIG
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return {}


def declared_prompts(model_dir: str | Path) -> Prompts:
    """The query and document prompts a model directory's sentence-transformers config declares
    (the first of :data:`QUERY_NAMES` / :data:`DOCUMENT_NAMES` present); empty where none."""
    prompts = _st_config(model_dir).get("prompts") or {}
    first = lambda names: next((prompts[n] for n in names if isinstance(prompts.get(n), str)), "")  # noqa: E731
    return Prompts(first(QUERY_NAMES), first(DOCUMENT_NAMES))


def resolve_prompts(model_dir: str | Path, override: dict | object | None) -> Prompts:
    """``override`` (a ``PromptsConfig`` or a mapping with ``query``/``document``) when given,
    else what the model declares. A local directory is expected; a hub id declares nothing."""
    if override is not None:
        values = override if isinstance(override, dict) else override.model_dump()
        return Prompts(values.get("query") or "", values.get("document") or "")
    return declared_prompts(model_dir) if Path(model_dir).is_dir() else Prompts()


def declare_prompts(model_dir: str | Path, prompts: Prompts) -> None:
    """Make ``model_dir``'s sentence-transformers config declare ``prompts`` as ``query`` and
    ``document`` (the names ``prompt_name=`` and mteb use), replacing any other name of either;
    no prompt at all removes them. Written through a temporary file and a rename."""
    path = Path(model_dir) / ST_CONFIG
    config = _st_config(model_dir)
    kept = {k: v for k, v in (config.get("prompts") or {}).items() if k not in QUERY_NAMES + DOCUMENT_NAMES}
    config["prompts"] = {**kept, **{k: v for k, v in prompts.as_dict().items() if v}}
    if config.get("default_prompt_name") not in config["prompts"]:
        config["default_prompt_name"] = None
    with replacing(path) as tmp:
        tmp.write_text(json.dumps(config, indent=2))


def prompt_positions(tokenizer, prompt: str) -> int:
    """How many leading positions of a tokenised ``prompt + text`` the prompt (with the leading
    special tokens) takes: what the MLM term must never mask."""
    if not prompt:
        return 0
    ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    specials = set(tokenizer.all_special_ids)
    end = len(ids)
    while end and ids[end - 1] in specials:
        end -= 1
    return end
