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
