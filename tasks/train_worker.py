"""One rank of a data-parallel training stage; ``tasks.train`` starts it under ``torchrun``:

    torchrun --standalone --nproc-per-node N -m tasks.train_worker OUT_DIR/launch.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from mosaic_core.config import StageConfig, TrainConfig
from mosaic_core.trainer import train_stage
from tasks.train import load_split, stage_hooks


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.distributed.init_process_group("nccl" if cuda else "gloo")
    try:
        stage = StageConfig.model_validate(spec["stage"])
        data, validation = load_split(spec["pairs_source"], TrainConfig.model_validate(spec["cfg"]), stage,
                                      spec["examples_dir"])
        hooks = stage_hooks(stage)
        hooks.progress = sys.stderr.isatty()
        train_stage(spec["input_model"], data, stage, Path(spec["out_dir"]), validation, spec["fingerprint"], hooks)
    finally:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
