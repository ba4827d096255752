"""What the pipeline config derives: the plain fine-tuning control of a run."""

import pytest
from pydantic import ValidationError

from mosaic_core.config import PipelineConfig, PromptsConfig, TrainConfig


def test_the_control_is_one_contrastive_stage_with_the_run_s_budget_pairs_and_prompts():
    train = TrainConfig.preset("warmup", {"max_steps": 30, "hard_negatives": 3, "lr": 3e-5,
                                          "prompts": {"query": "q: ", "document": "d: "}},
                               {"mlm": {"max_steps": 10}}, merge_weights=(0.5,))
    (stage,) = train.control().stages
    assert (stage.name, stage.kind, stage.max_steps) == ("control", "contrastive", 10 + 30 + 30)
    assert (stage.hard_negatives, stage.lr, stage.prompts) == (3, 3e-5, PromptsConfig(query="q: ", document="d: "))
    assert train.control().merge_weights == () and train.control().heldout_pairs == train.heldout_pairs
    by_epochs = TrainConfig.preset("paper", {"epochs": 2}).control().stages[0]
    assert (by_epochs.max_steps, by_epochs.epochs) == (None, 4)


def test_beating_the_control_needs_a_control():
    with pytest.raises(ValidationError, match="set control: contrastive"):
        PipelineConfig.load({"gate": {"beat_control": True}})
    assert PipelineConfig.load({"control": "contrastive", "gate": {"beat_control": True}}).control == "contrastive"
