"""Which tick a run is, the replay sample, the drift measure and an update tick's training budget."""

import numpy as np
import pytest

from mosaic_core.config import TrainConfig, UpdateConfig
from mosaic_core.trainer.continual import (
    FULL,
    NONE,
    UPDATE,
    replay_sample,
    score_drift,
    split_share,
    tick_kind,
    tick_training,
)

LIVE = {"tick": 3, "kind": UPDATE, "model_hash": "h"}


@pytest.mark.parametrize(("previous", "args", "kw", "kind", "why"), [
    (None, ("h", 0, 0, 0), {}, FULL, "first run"),
    (LIVE, ("h", 5, 100, 1), {"full_asked": True}, FULL, "asked for"),
    (LIVE, ("other", 5, 100, 1), {}, FULL, "configuration"),
    ({**LIVE, "models_present": False}, ("h", 5, 100, 1), {}, FULL, "gone"),
    (LIVE, ("h", 0, 100, 1), {}, NONE, "no new pairs since tick 3"),
    ({**LIVE, "kind": FULL}, ("h", 0, 100, 0), {}, FULL, "from cache"),
    ({**LIVE, "kind": FULL}, ("h", 0, 100, 0), {"gone": 2}, FULL, "2 that the live models trained on are gone"),
    (LIVE, ("h", 5, 100, 1), {"sparse": True}, FULL, "dense models only"),
    (LIVE, ("h", 30, 100, 1), {}, FULL, "new baseline"),
    (LIVE, ("h", 5, 100, 10), {}, FULL, "10 update ticks in a row"),
    (LIVE, ("h", 5, 100, 1), {"split_drift": 0.2}, FULL, "three or more pieces"),
    (LIVE, ("h", 5, 100, 1), {"split_drift": 0.01}, UPDATE, "5 new pairs (5.0% of the training pairs)"),
    ({**LIVE, "score_drift": {"drop": 0.2, "low": 0.1, "high": 0.3, "new": 12}}, ("h", 5, 100, 1), {}, FULL,
     "scored the 12 held-out pairs added since the last full rebuild 20.0 NDCG@10 points below"),
    ({**LIVE, "score_drift": {"drop": 0.2, "low": 0.1, "high": 0.3, "new": 12}}, ("h", 0, 100, 1), {}, FULL,
     "20.0 NDCG@10 points below"),  # nothing new: the live models are rebuilt all the same
    ({**LIVE, "score_drift": {"drop": 0.2, "low": -0.05, "high": 0.4, "new": 12}}, ("h", 5, 100, 1), {}, UPDATE,
     "new pairs"),  # within noise
    ({**LIVE, "score_drift": {"drop": 0.03, "low": 0.01, "high": 0.05, "new": 400}}, ("h", 5, 100, 1), {}, UPDATE,
     "new pairs"),  # beyond noise, but below update.score_drift
])
def test_the_tick_kind_and_its_reason(previous, args, kw, kind, why):
    got = tick_kind(previous, *args[:2], args[2], args[3], UpdateConfig(), **kw)
    assert got.kind == kind and why in got.reason


def test_update_ticks_can_be_turned_off_and_only_a_rerun_from_cache_is_no_new_tick():
    assert tick_kind(LIVE, "h", 5, 100, 1, UpdateConfig(enabled=False)).kind == FULL
    full = {**LIVE, "kind": FULL}
    assert tick_kind(full, "h", 0, 100, 0, UpdateConfig()).rerun
    assert not tick_kind(full, "other", 0, 100, 0, UpdateConfig()).rerun  # a config change is a new full tick
    assert not tick_kind(full, "h", 0, 100, 0, UpdateConfig(), gone=1).rerun


def test_the_replay_sample_is_seeded_sized_and_drawn_from_the_earlier_pairs():
    earlier = np.arange(100, 200, dtype=np.uint64)
    a = replay_sample(earlier, 10, 1.5, seed=0, tick=2)
    assert len(a) == 15 and np.isin(a, earlier).all() and len(set(a.tolist())) == 15
    assert np.array_equal(a, replay_sample(earlier[::-1].copy(), 10, 1.5, seed=0, tick=2))  # order-free
    assert not np.array_equal(a, replay_sample(earlier, 10, 1.5, seed=0, tick=3))  # another tick, another draw
    assert len(replay_sample(earlier, 500, 1.0, 0, 2)) == 100 and len(replay_sample(earlier, 10, 0.0, 0, 2)) == 0
    assert len(replay_sample(earlier, 5, 1.0, 0, 2, batch=32)) == 27  # topped up to one batch with the new pairs
    assert len(replay_sample(np.repeat(earlier[:3], 4), 10, 1.0, 0, 2)) == 3  # distinct pairs only


def test_split_share_counts_occurrences_of_words_in_three_or_more_pieces():
    def pieces(words):
        return [list(w) if w.startswith("z") else [w] for w in words]  # a z-word: one piece a letter

    assert split_share([("cell", 6), ("zq", 3), ("zqx", 1)], pieces) == pytest.approx(0.1)
    assert split_share([], pieces) == 0.0


def test_an_update_tick_trains_the_retrieval_stages_for_the_pairs_it_holds():
    train = TrainConfig.preset("warmup", heldout_pairs=64, validation_pairs=64, merge_weights=(0.5,))
    tick = tick_training(train, pairs=100, epochs=2.0)
    assert [s.name for s in tick.stages] == ["joint", "contrastive"]  # no MLM warm-up: the live head is trained
    assert [s.max_steps for s in tick.stages] == [7, 7]  # ceil(2 × 100 / 32), under the stages' 80
    assert tick_training(train, pairs=10_000, epochs=1.0).stages[0].max_steps == 80  # at most the stage's own
    assert (tick.heldout_pairs, tick.validation_pairs, tick.merge_weights, tick.mlm_warmup) == (0, 0, (), "off")
    assert all(s.eval_every is None for s in tick.stages)
    assert tick.control().stages[0].max_steps == 14  # the control: the same steps, as on a full rebuild
    per_stage = tick_training(train, pairs=100, epochs={"joint": 0.5})  # the full rebuild's passes, by stage
    assert [s.max_steps for s in per_stage.stages] == [2, 4]  # ceil(0.5 × 100 / 32); a stage not named: one pass
    with pytest.raises(ValueError, match="retrieval stages"):
        tick_training(TrainConfig.preset("warmup").model_copy(update={"stages": train.stages[:1]}), 10, 1.0)


def test_score_drift_compares_the_held_out_pairs_added_since_the_full_rebuild_with_the_earlier_ones():
    earlier = np.arange(1, 41, dtype=np.uint64)
    same = {**{int(h): 0.8 for h in earlier}, **{h: 0.8 for h in range(100, 112)}}
    drift = score_drift(same, earlier)
    assert (drift["new"], drift["earlier"]) == (12, 40) and drift["drop"] == pytest.approx(0.0)
    moved = {**{int(h): 0.8 + 0.01 * (h % 3) for h in earlier}, **{h: 0.3 + 0.02 * (h % 4) for h in range(100, 112)}}
    drift = score_drift(moved, earlier)
    assert drift["drop"] == pytest.approx(0.81 - 0.33, abs=0.01) and 0 < drift["low"] < drift["drop"] < drift["high"]
    assert tick_kind({**LIVE, "score_drift": drift}, "h", 5, 100, 1, UpdateConfig()).kind == FULL
    assert score_drift({**{int(h): 0.8 for h in earlier}, 100: 0.1, 101: 0.1}, earlier) is None  # 2 new: too few
