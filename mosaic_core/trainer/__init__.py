"""The trainer of stages 2–3 (and the MLM warm-up): one :class:`StageConfig`, one model in, one out.

``build`` makes the parts (device, model, optimizer, schedule, collator, batch plan), ``state``
saves and restores one :class:`TrainState` (resume is exact), ``loop`` runs the steps, and
``stage`` ties them together: :func:`train_stage`.
"""

from mosaic_core.trainer.build import StageInputError
from mosaic_core.trainer.data import BatchPlan, PairSet
from mosaic_core.trainer.loop import Hooks, InjectedFailure, fail_after
from mosaic_core.trainer.stage import StageResult, frequency_entropy, train_stage

__all__ = ["BatchPlan", "Hooks", "InjectedFailure", "PairSet", "StageInputError", "StageResult", "fail_after",
           "frequency_entropy", "train_stage"]
