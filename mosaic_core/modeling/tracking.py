"""Experiment tracking of a training run as the loops see it: a :class:`Tracker` takes scalars
with their step, the run's parameters once, and is closed at the end. Every stage (and stage 1's
distillation) writes TensorBoard event files to ``<its output folder>/tb`` when the
``tensorboard`` package is installed (the ``tracking`` extra); without it the loops run the same
with a :class:`NullTracker`, after one warning. MLflow is the pipeline's business (``tasks/``):
it reads these series back after a stage, so a lost tracking server never stops a training loop.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from mosaic_core.modeling.modeldir import TB_DIR

log = logging.getLogger(__name__)
INSTALL_HINT = "pip install 'mosaic[tracking]'"


class Tracker(Protocol):
    """What a training loop reports to."""

    def params(self, values: Mapping[str, object]) -> None:
        """The run's parameters (its config), once."""

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        """Scalar series by tag (``loss/total``, ``train/lr``, …) at optimizer step ``step``."""

    def close(self) -> None:
        """Flush and release; the tracker takes nothing more."""


class NullTracker:
    """Tracks nothing: the loop without TensorBoard."""

    def params(self, values: Mapping[str, object]) -> None:
        pass

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardTracker:
    """Event files in ``log_dir`` through ``torch.utils.tensorboard.SummaryWriter``.

    ``purge_step``: a resumed run's first new step; TensorBoard then drops what an interrupted
    attempt wrote from that step on, so a curve has one point per step."""

    def __init__(self, log_dir: Path, purge_step: int | None = None, layout: Mapping[str, Mapping] | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(log_dir), purge_step=purge_step, flush_secs=20)
        if layout:
            self.writer.add_custom_scalars({k: dict(v) for k, v in layout.items()})

    def params(self, values: Mapping[str, object]) -> None:
        rows = "\n".join(f"| {k} | {json.dumps(v, default=str)} |" for k, v in flatten(values).items())
        self.writer.add_text("params", "| parameter | value |\n| --- | --- |\n" + rows, 0)

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        for tag, value in values.items():
            if value is not None and math.isfinite(float(value)):
                self.writer.add_scalar(tag, float(value), step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


@functools.cache
def tensorboard_available() -> bool:
    """Whether event files can be written; warns once per process when they cannot."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        log.warning("TensorBoard event files are off: the tensorboard package is not installed (%s)", INSTALL_HINT)
        return False
    return True


def open_tracker(out_dir: Path, resumed_from: int | None = None,
                 layout: Mapping[str, Mapping] | None = None) -> Tracker:
    """The tracker of a run writing to ``out_dir``: TensorBoard in ``out_dir/tb`` (a fresh run
    first removes an earlier run's event files there, as it restarts its ``train_log.jsonl``; a
    run resumed from its checkpoint at step ``resumed_from`` keeps what was logged up to it),
    or a :class:`NullTracker` without the package. ``layout``: TensorBoard custom-scalar charts
    (category → chart title → ``["Multiline", [tags]]``)."""
    if not tensorboard_available():
        return NullTracker()
    log_dir = Path(out_dir) / TB_DIR
    if not resumed_from:
        shutil.rmtree(log_dir, ignore_errors=True)
    return TensorBoardTracker(log_dir, resumed_from + 1 if resumed_from else None, layout)


def flatten(values: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """Nested mappings as ``a.b.c`` keys (how a config becomes a flat parameter list)."""
    out: dict[str, object] = {}
    for k, v in values.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
