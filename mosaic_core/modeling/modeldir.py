"""The model directory: the one module that names, writes and reads MOSAIC's files beside a
sentence-transformers model (which ``SentenceTransformer``/``AutoModel`` load as usual).

| file | written by | holds |
| --- | --- | --- |
| ``domain_token_ids.json`` | stage 1, copied by every stage | V_D: the ids of the added tokens |
| ``vocab_report.json`` / ``.md`` | stage 1 | what stage 1 did (:class:`mosaic_core.vocab.build.VocabReport`) |
| ``mlm_head.safetensors`` + ``mlm_head.json`` | stages 2–3 | the trained MLM head (transform + bias) and its settings |
| ``stage.json`` | stages 2–3 | the stage's config, input model, fingerprint and result (paths: see below) |
| ``README.md`` | every step that writes a model | its model card (:mod:`~mosaic_core.modeling.card`) |
| ``tb/`` | stage 1, stages 2–3 | TensorBoard event files (not in fingerprints or published copies) |

A sparse (SPLADE) model directory is a sentence-transformers ``SparseEncoder`` instead
(:mod:`mosaic_core.modeling.sparse`): its MLM head lives inside the masked-LM checkpoint, so it has no
``mlm_head.*``; the other files are the same.

Every write goes through a temporary file and a rename, so a crash never leaves half a file.
``stage.json`` names the model folders beside its own (``input_model``, the merge's
``start_model``, ``result.out_dir``) relative to it (``../stage1``), so a moved data root keeps
its lineage; :func:`read_stage_record` resolves them against where the folder is now.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import torch

from mosaic_core.files import replacing

log = logging.getLogger(__name__)
DOMAIN_IDS = "domain_token_ids.json"
VOCAB_REPORT_JSON, VOCAB_REPORT_MD = "vocab_report.json", "vocab_report.md"
HEAD_WEIGHTS, HEAD_CONFIG = "mlm_head.safetensors", "mlm_head.json"
STAGE_RECORD = "stage.json"
MODEL_CARD = "README.md"
TB_DIR = "tb"
"""Where a stage's event files go, inside its output folder (``tensorboard --logdir ROOT`` finds them all)."""


def _write_text(path: Path, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


# -- V_D --------------------------------------------------------------------------------------

def write_domain_ids(model_dir: Path, ids: list[int]) -> None:
    _write_text(Path(model_dir) / DOMAIN_IDS, json.dumps(list(ids)))


def read_domain_ids(model_dir: str | Path) -> torch.Tensor | None:
    """V_D of a stage-1 (or later) output as a ``[|V_D|]`` long tensor; ``None`` for a model without one."""
    path = Path(model_dir) / DOMAIN_IDS
    return torch.tensor(json.loads(path.read_text()), dtype=torch.long) if path.is_file() else None


def has_domain_ids(model_dir: str | Path) -> bool:
    return (Path(model_dir) / DOMAIN_IDS).is_file()


def copy_domain_ids(src: str | Path, dst: Path) -> None:
    if has_domain_ids(src):
        shutil.copyfile(Path(src) / DOMAIN_IDS, Path(dst) / DOMAIN_IDS)


# -- stage 1's report -------------------------------------------------------------------------

def write_vocab_report(model_dir: Path, as_json: str, as_markdown: str) -> None:
    _write_text(Path(model_dir) / VOCAB_REPORT_JSON, as_json)
    _write_text(Path(model_dir) / VOCAB_REPORT_MD, as_markdown)


def read_vocab_report(model_dir: str | Path) -> dict | None:
    path = Path(model_dir) / VOCAB_REPORT_JSON
    return json.loads(path.read_text()) if path.is_file() else None


def vocab_report_markdown(model_dir: str | Path) -> str | None:
    path = Path(model_dir) / VOCAB_REPORT_MD
    return path.read_text() if path.is_file() else None


# -- the MLM head -----------------------------------------------------------------------------

def save_head(model_dir: Path, state: dict[str, torch.Tensor], config: dict) -> None:
    from safetensors.torch import save_file

    path = Path(model_dir) / HEAD_WEIGHTS
    with replacing(path) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(tmp))
    _write_text(Path(model_dir) / HEAD_CONFIG, json.dumps(config))


def load_head(model_dir: str | Path) -> tuple[dict[str, torch.Tensor], dict] | None:
    """(head weights, head settings) saved by a stage, or ``None``."""
    from safetensors.torch import load_file

    path = Path(model_dir) / HEAD_WEIGHTS
    if not path.is_file():
        return None
    return load_file(str(path)), json.loads((Path(model_dir) / HEAD_CONFIG).read_text())


def has_trained_head(model_dir: str | Path) -> bool:
    return (Path(model_dir) / HEAD_WEIGHTS).is_file()


# -- the model card ---------------------------------------------------------------------------

def write_card(model_dir: Path, text: str) -> None:
    _write_text(Path(model_dir) / MODEL_CARD, text)


# -- a stage's record -------------------------------------------------------------------------

_RECORD_PATHS = (("input_model",), ("start_model",), ("result", "out_dir"))
"""Where a stage record holds a model directory (or a hub id)."""
_RELATIVE = "relative_paths"


def _portable(value: object, model_dir: Path) -> str | None:
    """``value`` relative to ``model_dir`` (``../stage1``) when it is a local path inside the folder
    that holds ``model_dir`` (DATA_ROOT/models, a `mosaic train --out` folder), so the record
    survives moving that folder; ``None`` for anything else (a hub id, a path elsewhere)."""
    if not isinstance(value, str) or not value:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute() and not path.exists():
        return None  # a hub id or an alias, not a path
    path, home = path.resolve(), model_dir.resolve()
    if path != home.parent and home.parent not in path.parents:
        return None
    return os.path.relpath(path, home)


def write_stage_record(model_dir: Path, record: dict) -> None:
    """Write ``record``; the model directories it names inside the folder holding ``model_dir``
    are stored relative to ``model_dir`` (listed under ``relative_paths``), so moving a data
    root keeps them valid. :func:`read_stage_record` resolves them again."""
    record, relative = json.loads(json.dumps(record)), []
    for keys in _RECORD_PATHS:
        *parents, last = keys
        holder = record
        for k in parents:
            holder = holder.get(k) if isinstance(holder, dict) else None
        if isinstance(holder, dict) and (rel := _portable(holder.get(last), Path(model_dir))) is not None:
            holder[last] = rel
            relative.append(".".join(keys))
    if relative:
        record[_RELATIVE] = relative
    _write_text(Path(model_dir) / STAGE_RECORD, json.dumps(record, indent=2))


def read_stage_record(model_dir: str | Path) -> dict | None:
    """The record a stage wrote in ``model_dir`` (``None`` if none), its relative paths resolved
    against where ``model_dir`` is now."""
    path = Path(model_dir) / STAGE_RECORD
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    home = Path(model_dir).resolve()
    for dotted in record.pop(_RELATIVE, []):
        *parents, last = dotted.split(".")
        holder = record
        for k in parents:
            holder = holder[k]
        holder[last] = os.path.normpath(home / holder[last])
    return record


def is_complete_stage(model_dir: str | Path) -> bool:
    """Whether a stage finished writing a whole model here: its record (written last) is there
    and the model loads (:func:`~mosaic_core.modeling.refs.check_loadable`: config, weights,
    tokenizer). A damaged model is named in one warning; the caller then makes it again."""
    if not (Path(model_dir) / STAGE_RECORD).is_file():
        return False
    return is_whole_model(model_dir)


def is_whole_model(model_dir: str | Path) -> bool:
    """Whether the model written to ``model_dir`` loads; one warning naming what is wrong if not."""
    from mosaic_core.modeling.refs import ModelNotFound, check_loadable

    try:
        check_loadable(model_dir)
    except ModelNotFound as exc:
        log.warning("%s; it is made again", exc)
        return False
    return True
