"""The chunk a stage takes when none is set: the whole batch when its activations fit the budget,
else the most pairs that do."""

from types import SimpleNamespace

import torch

from mosaic_core.config import StageConfig
from mosaic_core.trainer.build import Lengths
from mosaic_core.trainer.memory import choose_chunk, sequence_bytes

MINILM = SimpleNamespace(hidden_size=384, num_attention_heads=12, num_hidden_layers=6)
CPU = torch.device("cpu")
LENGTHS = Lengths(64, 256)


def stage(**kw) -> StageConfig:
    return StageConfig(name="s", kind="contrastive", **kw)


def test_estimate_grows_with_length_and_depth():
    assert sequence_bytes(MINILM, 256) > 4 * sequence_bytes(MINILM, 64)  # attention scores grow with s²
    deeper = SimpleNamespace(**{**vars(MINILM), "num_hidden_layers": 12})
    assert sequence_bytes(deeper, 256) == 2 * sequence_bytes(MINILM, 256)
    assert 90 * 2**20 < sequence_bytes(MINILM, 64) + sequence_bytes(MINILM, 256) < 110 * 2**20  # bench: 97–100 MiB


def test_batch_that_fits_runs_whole():
    assert choose_chunk(stage(activation_gib=4.0), MINILM, LENGTHS, 32, CPU) == 32
    # with hard negatives the one pass holds them too: the chunk covers them
    assert choose_chunk(stage(activation_gib=10.0, hard_negatives=2), MINILM, LENGTHS, 32, CPU) == 64


def test_batch_over_budget_is_chunked_to_fit():
    pair = sequence_bytes(MINILM, 64) + sequence_bytes(MINILM, 256)
    chunk = choose_chunk(stage(activation_gib=1.0), MINILM, LENGTHS, 32, CPU)
    assert chunk < 32 and chunk * pair <= 2**30 < (chunk + 1) * pair
    # the CPU default budget, 0.75 GiB: chunks of 8 MiniLM pairs
    assert choose_chunk(stage(), MINILM, LENGTHS, 32, CPU) == 8
    # hard negatives do not shrink the chunk of pairs: they are passed apart, as many at a time
    assert choose_chunk(stage(activation_gib=1.0, hard_negatives=1), MINILM, LENGTHS, 32, CPU) == chunk
    # a budget below one pair still trains, one pair a pass
    assert choose_chunk(stage(activation_gib=0.01), MINILM, LENGTHS, 32, CPU) == 1


def test_explicit_chunk_wins():
    assert choose_chunk(stage(chunk_size=5, activation_gib=100.0), MINILM, LENGTHS, 32, CPU) == 5
    assert choose_chunk(stage(chunk_size=500), MINILM, LENGTHS, 32, CPU) == 500
