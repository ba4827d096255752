"""The readers every evaluation task kind loads with (:class:`mosaic_core.eval_tasks.TaskReaders`):
the files' readers the caller gives (storage's: the core never imports ``storage``; the tasks
layer passes them) and the evaluation's own builders, which the kinds, beside ``config.py`` at
the top of the core, may not import themselves."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mosaic_core.data.islamic import read_quran
from mosaic_core.eval_tasks import TaskReaders
from mosaic_core.evaluate import scoring
from mosaic_core.trainer.heldout import heldout_split, retrieval_task


def files_digest(folder: Path) -> str | None:
    """16 hex digits of the bytes of every file under ``folder`` (in path order); None when it is
    no folder or holds no file."""
    files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16] if files else None


def mteb_version() -> str:
    import mteb  # seconds to import: only when an mteb task is checked

    return mteb.__version__


def task_readers(*, read_beir: Callable[[Path, str | None], Any], read_sts: Callable[[Path], Any],
                 pair_batches: Callable[[str, str, str, dict[str, int]], Iterable[Any]],
                 corpus_fingerprint: Callable[[str], str],
                 recorded_split: Callable[[str, int, int], Any]) -> TaskReaders:
    """The readers of a task kind: these file readers and the evaluation's builders."""
    return TaskReaders(
        read_beir=read_beir, read_sts=read_sts, pair_batches=pair_batches, corpus_fingerprint=corpus_fingerprint,
        recorded_split=recorded_split,
        files_digest=files_digest, mteb_version=mteb_version, hub_task=scoring.hub_task,
        retrieval_task=scoring.retrieval_task, sts_task=scoring.sts_task, heldout_split=heldout_split,
        heldout_retrieval=retrieval_task, read_verses=read_quran, verse_retrieval_data=scoring.verse_retrieval_data,
        unavailable=scoring.TaskUnavailable)
