"""The held-out split's sizes: what the report's funnel states is what training held out."""

from mosaic_core.trainer.heldout import split_indices, split_sizes


def test_the_split_sizes_are_those_split_indices_holds_out():
    pairs = [(f"query {i}", f"document {i}") for i in range(219)]
    for asked in ((256, 256), (4, 4), (0, 30), (43, 0)):
        split = split_indices(pairs, *asked)
        assert split_sizes(len(pairs), *asked) == (len(split.test), len(split.validation)), asked
    assert split_sizes(219, 256, 256) == (43, 35)  # a fifth each: a small file is not held out whole
