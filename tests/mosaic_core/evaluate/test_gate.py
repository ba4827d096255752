from mosaic_core.evaluate.gate import publish_gate

SCORES = {"adapted": {"heldout": 0.90, "scifact": 0.62},
          "base": {"heldout": 0.88, "scifact": 0.66},
          "published": {"heldout": 0.89, "scifact": 0.60}}


def test_a_candidate_worse_than_the_base_on_one_task_is_not_published_and_says_why():
    check = publish_gate("adapted", SCORES, ["base", "published"], ["heldout", "scifact"])
    assert not check.passed and check.severity == "WARN"
    assert check.message == "not published: adapted 62.00 < base 66.00 on scifact"
    deltas = {(c["task"], c["reference"]): round(c["delta"], 4) for c in check.metadata["comparisons"]}
    assert deltas == {("heldout", "base"): 0.02, ("heldout", "published"): 0.01, ("scifact", "base"): -0.04,
                      ("scifact", "published"): 0.02}


def test_tolerance_gate_tasks_and_missing_scores():
    assert publish_gate("adapted", SCORES, ["base"], ["heldout"]).passed
    assert publish_gate("adapted", SCORES, ["base", "published"], ["heldout", "scifact"], tolerance=0.04).passed
    assert not publish_gate("adapted", SCORES, ["base"], ["heldout", "scifact"], tolerance=0.039).passed
    missing = publish_gate("adapted", SCORES, ["base"], ["heldout", "nfcorpus"])
    assert not missing.passed and "adapted has no score on nfcorpus" in missing.message
    tie = publish_gate("base", SCORES, ["base"], ["heldout", "scifact"])  # equal is not worse
    assert tie.passed and tie.severity == "INFO" and tie.message.startswith("published:")


def test_the_control_wins_unless_the_adapted_model_is_ahead_beyond_noise():
    from mosaic_core.evaluate.gate import choose_recipe

    ahead = {"mean": 0.02, "low": 0.004, "high": 0.036, "queries": 256}
    choice = choose_recipe("contrastive", "control", ahead)
    assert (choice.model, choice.recipe) == ("contrastive", "adapted")
    assert "ahead of the control by +2.00 NDCG@10 points [95 % interval +0.40, +3.60] on 256" in choice.message
    level = choose_recipe("contrastive", "control", {"mean": 0.01, "low": -0.002, "high": 0.02, "queries": 256})
    assert (level.model, level.recipe) == ("control", "control") and "not ahead beyond noise" in level.message
    behind = choose_recipe("contrastive", "control", {"mean": -0.03, "low": -0.05, "high": -0.01, "queries": 256})
    assert behind.model == "control" and "is behind" in behind.message
    assert choose_recipe("contrastive", "control", None).model == "control"


def test_the_recipe_is_chosen_from_per_query_validation_scores():
    from tasks.publish import pick_recipe

    def score(model_values):
        return [{"task": "validation", "metric": "ndcg_at_10", "value": sum(model_values) / len(model_values),
                 "n": len(model_values), "scores": {}, "per_query": {f"q{i}": v for i, v in enumerate(model_values)},
                 "dim": None}]
    control = [0.5, 0.6, 0.4, 0.7] * 25
    better = [v + 0.1 for v in control]
    assert pick_recipe.fn("final", "control", {"final": score(better), "control": score(control)})["model"] == "final"
    noisy = [v + (0.2 if i % 2 else -0.19) for i, v in enumerate(control)]
    chosen = pick_recipe.fn("final", "control", {"final": score(noisy), "control": score(control)})
    assert chosen["recipe"] == "control" and chosen["low"] < 0 < chosen["high"]
