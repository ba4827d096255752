"""Token selection by evidence (mosaic_core.vocab.selection) on hand-made WordPiece vocabularies."""

import json
from collections import Counter

import pytest
from tokenizers import Tokenizer, models

from mosaic_core.vocab.selection import Segmenter, fertility_of, select_tokens
from mosaic_core.vocab.tokenizers import WordPieceSpec, candidate_tokens

CHARS = "abcdefghijklmnopqrstuvwxyz"


def wordpiece_state(extra: list[str]) -> dict:
    vocab = ["[UNK]", *CHARS, *(f"##{c}" for c in CHARS), *extra]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(dict.fromkeys(vocab))}, unk_token="[UNK]"))
    return json.loads(tok.to_str())


def select(extra: list[str], candidates: list[str], counts: dict[str, int], **kw):
    state = wordpiece_state(extra)
    spec = WordPieceSpec.from_state(state)
    pieces = {t: spec.base_pieces(t) for t in candidates}
    first = len(state["model"]["vocab"])
    return select_tokens(spec, state, pieces, Counter(counts), first, {}, **kw)


def test_a_token_that_only_resegments_is_rejected_and_a_useful_one_kept():
    # "ats" turns at ##sas into ats ##as (2 pieces either way) and shortens "ats" (at ##s -> ats).
    extra = ["at", "##sas", "##as"]
    assert select(extra, ["ats"], {"atsas": 5, "ats": 3}).rejected == {"ats": "no_saving"}
    kept = select(extra, ["ats"], {"atsas": 5, "ats": 10})
    assert list(kept.tokens) == ["ats"] and kept.uses == {"ats": 10} and kept.saved == {"ats": 10.0}


def test_a_token_that_makes_any_word_longer_is_rejected():
    # "ab" is greedy-matched first in "abcd": ab ##c ##d (3) instead of a ##bcd (2).
    result = select(["##bcd"], ["ab"], {"abcd": 1, "ab": 1000})
    assert result.rejected == {"ab": "no_saving"} and not result.tokens


def test_minimum_uses_and_the_cap_keep_the_most_saving_tokens():
    counts = {"cardio": 50, "hepato": 30, "nephro": 3}
    result = select([], ["cardio", "hepato", "nephro"], counts, min_count=5)
    assert list(result.tokens) == ["cardio", "hepato"] and result.rejected == {"nephro": "rare"}
    assert result.rejected_uses == {"nephro": 3}
    capped = select([], ["cardio", "hepato", "nephro"], counts, min_count=1, max_tokens=1)
    assert list(capped.tokens) == ["cardio"] and capped.rejected == {"hepato": "cap", "nephro": "cap"}
    # The saving of a 6-letter word split into single characters: 5 pieces per use.
    assert capped.saved["cardio"] == pytest.approx(50 * 5)


def test_dropping_a_token_reruns_the_selection_on_the_new_segmentation():
    # With both, "cardiomyo" wins every word and "cardio" is never used (rare: 0); alone,
    # "cardio" would shorten them.
    counts = {"cardiomyopathy": 10, "cardiomyocyte": 10}
    both = select([], ["cardio", "cardiomyo"], counts, min_count=1)
    assert list(both.tokens) == ["cardiomyo"] and both.rejected == {"cardio": "rare"}
    assert both.uses == {"cardiomyo": 20} and both.rejected_uses == {"cardio": 0}


def test_fertility_of_counts_every_occurrence():
    state = wordpiece_state(["the"])
    words, fertility, single = fertility_of(Segmenter(state), Counter({"the": 3, "ab": 1}))
    assert (words, fertility, single) == (4, pytest.approx(5 / 4), pytest.approx(3 / 4))


def test_candidates_come_in_a_stable_order_whatever_ids_the_trainer_gave():
    from transformers import PreTrainedTokenizerFast

    base_state = wordpiece_state([])
    base = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(base_state)),
                                   unk_token="[UNK]")
    spec = WordPieceSpec.from_state(base_state)
    orders = []
    for tokens in (["zeta", "##ab", "alpha"], ["alpha", "zeta", "##ab"]):
        vocab = {"[UNK]": 0, **{t: i + 1 for i, t in enumerate(tokens)}}
        domain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece(vocab, unk_token="[UNK]")),
                                         unk_token="[UNK]")
        orders.append(list(candidate_tokens(spec, base, domain)[0]))
    assert orders[0] == orders[1] == ["##ab", "zeta", "alpha"]  # shortest first, then alphabetical


def test_numbers_are_not_domain_vocabulary():
    result = select([], ["##71", "2019", "cardio"], {"1971": 50, "2019": 40, "cardio": 30})
    assert list(result.tokens) == ["cardio"]
    assert result.rejected == {"##71": "not_a_word", "2019": "not_a_word"}


def test_the_ladder_drops_rare_fragments_before_they_sway_a_threshold():
    # With "cardiom" present, "cardiomyo" (5 uses) takes it and "cardio" is used 18 times; without
    # it, 23. Dropping everything under 20 at once would lose both; climbing 1, 2, 3, 5, 10, 20
    # removes "cardiom" at 10, so "cardio" is counted without it and stays.
    result = select([], ["cardio", "cardiom"], {"cardiomyo": 5, "cardio": 18}, min_count=20)
    assert list(result.tokens) == ["cardio"] and result.uses == {"cardio": 23}
    assert result.rejected == {"cardiom": "rare"} and result.rejected_uses == {"cardiom": 5}
