"""What the pipeline config derives: the presets' budget and the plain fine-tuning control of a run."""

import pytest
from pydantic import ValidationError

from mosaic_core.config import PipelineConfig, PromptsConfig, TrainConfig


def test_the_control_is_one_contrastive_stage_with_the_run_s_budget_pairs_and_prompts():
    train = TrainConfig.preset("warmup", {"max_steps": 30, "hard_negatives": 3, "lr": 3e-5,
                                          "prompts": {"query": "q: ", "document": "d: "}},
                               {"mlm": {"max_steps": 10}}, merge_weights=(0.5,))
    (stage,) = train.control().stages
    assert (stage.name, stage.kind, stage.max_steps) == ("control", "contrastive", 30 + 30)  # the warm-up's
    # encoder is frozen: its steps train none of what the control trains
    assert TrainConfig.preset("warmup").control().stages[0].max_steps == 160  # the uncapped warm-up adds none
    assert (stage.hard_negatives, stage.lr, stage.prompts) == (3, 3e-5, PromptsConfig(query="q: ", document="d: "))
    assert train.control().merge_weights == () and train.control().heldout_pairs == train.heldout_pairs
    by_epochs = TrainConfig.preset("paper", {"epochs": 2}).control().stages[0]
    assert (by_epochs.max_steps, by_epochs.epochs) == (None, 4)


def test_the_presets_train_the_budget_curve_s_recommendation_unless_passes_are_asked_for():
    from mosaic_core.trainer.build import total_steps
    from mosaic_core.trainer.data import BatchPlan

    budget = {"max_steps": 80, "batch_size": 32, "hard_negatives": 1, "eval_every": 20}
    default = TrainConfig()  # what `mosaic run` trains on PubMed
    assert [{k: getattr(s, k) for k in budget} for s in default.stages] == [budget, budget]
    # The steps are the budget whatever the pairs: several passes over 300, a quarter of one over 10,000.
    joint = default.stages[0]
    assert [total_steps(joint, BatchPlan(n, joint.batch_size, 0)) for n in (300, 10_000)] == [80, 80]
    assert default.control().stages[0].max_steps == 160
    assert PipelineConfig.load({}).train.stages == default.stages
    written = PipelineConfig.load({"train": {"stages": [{"name": "j", "kind": "joint"}]}}).train.stages[0]
    assert (written.max_steps, written.batch_size, written.hard_negatives) == (None, 128, 0)  # a YAML stage's own
    assert TrainConfig.preset("contrastive-only").stages[0].max_steps == 160  # equal compute to the paper preset
    warmup = TrainConfig.preset("warmup").stages
    assert [s.max_steps for s in warmup] == [None, 80, 80] and warmup[0].batch_size == 128  # the MLM warm-up's own
    general = TrainConfig.preset("multistage").stages[0]
    assert (general.max_steps, general.batch_size) == (None, 128)  # general pairs: not the domain's budget
    # Passes asked for replace the step cap, stage by stage; a cap given with them stays.
    three_passes = TrainConfig.preset("paper", {"epochs": "3"}).stages[0]  # `--set epochs=3` arrives as a string
    assert three_passes.max_steps is None and total_steps(three_passes, BatchPlan(320, 32, 0)) == 30
    assert [s.max_steps for s in TrainConfig.preset("paper", None, {"joint": {"epochs": 3}}).stages] == [None, 80]
    assert [s.max_steps for s in TrainConfig.preset("paper", {"epochs": 3, "max_steps": 500}).stages] == [500, 500]
    assert [s.max_steps for s in TrainConfig.preset("paper", {"epochs": 3}, {"joint": {"max_steps": 9}}).stages] \
        == [9, None]


def test_beating_the_control_needs_a_control():
    for off in ("none", None):
        with pytest.raises(ValidationError, match="set control: contrastive"):
            PipelineConfig.load({"control": off, "gate": {"beat_control": True}})
        assert not PipelineConfig.load({"control": off}).trains_control
    assert PipelineConfig.load({"gate": {"beat_control": True}}).control == "contrastive"  # the default


def test_a_base_without_an_mlm_head_gets_a_head_only_warm_up_before_the_joint_stage():
    train = TrainConfig.preset("paper", {"max_steps": 12, "batch_size": 8})
    warm = train.with_warmup(input_has_head=False)
    assert [(s.name, s.kind) for s in warm.stages] == [("mlm", "mlm"), ("joint", "joint"),
                                                       ("contrastive", "contrastive")]
    first = warm.stages[0]
    assert (first.mlm_rows, first.max_steps, first.batch_size, first.mlm_target) == (False, 12, 8, 0.85)
    assert warm.control().stages[0].max_steps == train.control().stages[0].max_steps == 24  # frozen encoder
    longer = train.model_copy(update={"mlm_warmup_steps": 60}).with_warmup(input_has_head=False)
    assert longer.stages[0].max_steps == 60 and longer.stages[1:] == warm.stages[1:]  # its own cap, no other
    assert longer.control().stages[0].max_steps == 24
    assert train.with_warmup(input_has_head=True) is train  # a base with a head: the paper preset
    assert train.model_copy(update={"mlm_warmup": "off"}).with_warmup(False).stages == train.stages
    contrastive_only = TrainConfig.preset("contrastive-only")
    assert contrastive_only.with_warmup(False) is contrastive_only  # no MLM term to warm up
    warmup_preset = TrainConfig.preset("warmup")
    assert warmup_preset.with_warmup(False) is warmup_preset  # a warm-up already first


def test_set_replaces_any_field_by_its_dotted_path():
    cfg = PipelineConfig.load({"base_model": "a"}).overridden(
        {"train.heldout_pairs": 100, "train.stages.0.max_steps": 7, "prompts.query": "q: ", "base_model": "b",
         "source.kind": "pairs", "source.path": "x.jsonl"})
    assert (cfg.train.heldout_pairs, cfg.train.stages[0].max_steps, cfg.train.stages[1].max_steps) == (100, 7, 80)
    assert cfg.prompts.query == "q: " and cfg.vocab.base_model == "b"  # base_model fills its copy, as in a YAML
    assert cfg.source.kind == "pairs" and cfg.source.path == "x.jsonl"  # a new kind starts from its own defaults
    for sets, error in (({"train.stages.5.max_steps": 1}, "not the index of one of its 2 items"),
                        ({"train.heldout_pairs.x": 1}, "heldout_pairs is a value, not a section"),
                        ({"train.nope": 1}, "Extra inputs are not permitted")):
        with pytest.raises(ValueError, match=error):
            PipelineConfig().overridden(sets)


@pytest.mark.parametrize(("fields", "why"), [
    ({}, "needs a teacher cross-encoder"),
    ({"teacher": "ce", "hard_negatives": 0}, "set hard_negatives >= 1"),
    ({"teacher": "ce", "model_kind": "sparse"}, "a sparse stage trains with infonce"),
    ({"teacher": "ce", "matryoshka_dims": (8, 4)}, "Matryoshka prefixes train with infonce"),
    ({"teacher": "ce", "symmetric": True}, "unset symmetric"),
])
def test_margin_mse_stages_refuse_what_they_cannot_train(fields, why):
    from mosaic_core.config import StageConfig

    with pytest.raises(ValidationError, match=why):
        StageConfig(name="gpl", kind="contrastive", objective="margin_mse", **{"hard_negatives": 1, **fields})
    with pytest.raises(ValidationError, match="set objective=margin_mse or unset teacher"):
        StageConfig(name="c", kind="contrastive", teacher="ce")
    stage = StageConfig(name="gpl", kind="contrastive", objective="margin_mse", teacher="ce", hard_negatives=1)
    control = TrainConfig(stages=(stage,)).control().stages[0]
    assert (control.objective, control.teacher) == ("margin_mse", "ce")  # the control trains the same recipe


def test_a_glossary_adds_its_dictionary_stage_after_the_warm_up_and_its_pairs_to_both_arms():
    cfg = PipelineConfig.load({"glossary": {"path": "g.jsonl", "dictionary": {"epochs": 3, "lr": 1e-3}}})
    train = cfg.training("/root/glossary/dictionary.jsonl", 100, "/root/glossary/definition_pairs.jsonl")
    d = train.dictionary
    assert (d.kind, d.pairs, d.max_steps, d.lr, d.mlm_rows, d.mlm_probability) == (
        "mlm", "/root/glossary/dictionary.jsonl", 19, 1e-3, True, 0.5)  # 3 passes over 100 texts, 16 a step
    assert cfg.training("d", 100_000, "p").dictionary.max_steps == 1000  # at most its max_steps
    assert train.extra_pairs == "/root/glossary/definition_pairs.jsonl"
    staged = train.with_warmup(input_has_head=False).with_dictionary()
    assert [s.name for s in staged.stages] == ["mlm", "dictionary", "joint", "contrastive"]
    assert train.data_for(d).heldout_pairs == 0 and train.data_for(d).extra_pairs is None  # its own texts, whole
    assert train.data_for(staged.stages[2]) is train
    control = train.control()
    assert control.dictionary is None and control.extra_pairs == train.extra_pairs  # the same text, no MLM
    assert control.stages[0].max_steps == cfg.train.control().stages[0].max_steps  # the dictionary adds no steps
    off = PipelineConfig.load({"glossary": {"path": "g.jsonl", "dictionary": {"epochs": 0}, "definition_pairs": 0}})
    assert off.training("d", 9, "p").dictionary is None and off.training("d", 9, "p").extra_pairs is None
    assert PipelineConfig().training("d", 9, "p") == PipelineConfig().train  # no glossary: the run as it was


def test_a_dictionary_template_must_name_the_term_and_its_definition():
    with pytest.raises(ValueError, match="must hold both"):
        PipelineConfig.load({"glossary": {"path": "g.jsonl", "dictionary": {"templates": ["{term} alone"]}}})
