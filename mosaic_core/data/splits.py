"""How many pairs a run holds out, and the fewest it needs: arithmetic the CLI checks a source
against before anything heavy is imported (the split itself is ``mosaic_core.trainer.heldout``)."""

from __future__ import annotations


def split_sizes(n: int, n_test: int, n_validation: int = 0) -> tuple[int, int]:
    """(test, validation) sizes of the held-out split over ``n`` pairs: what was asked, capped
    at a fifth of the pairs (the validation pairs: of the pairs left after the test pairs)."""
    n_test = min(n_test, n // 5)
    return n_test, min(n_validation, (n - n_test) // 5)


def pairs_needed(batch: int, heldout: int, validation: int) -> int:
    """The fewest distinct pairs a run trains on: once the test and validation pairs are held out
    (:func:`split_sizes`), one batch of ``batch`` pairs is left."""
    n = batch
    while n - sum(split_sizes(n, heldout, validation)) < batch:
        n += 1
    return n
