"""Workers for tests that run several ``torch.distributed`` ranks (gloo, CPU) with
``torch.multiprocessing.spawn``: spawned processes import them by module name, which a test
module loaded by pytest's importlib mode does not have."""

import torch

from mosaic_core.modeling.losses import matryoshka_info_nce


def matryoshka_rank(rank: int, init: str, q: torch.Tensor, d: torch.Tensor, dims: tuple, weights: tuple,
                    out: dict) -> None:
    """Rank ``rank`` of two: Matryoshka InfoNCE on its half of (q, d); ``out[rank]`` = the
    gradients of its rows divided by the world size (DDP averages parameter gradients)."""
    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        half = q.shape[0] // 2
        mine = [t[rank * half:(rank + 1) * half].clone().requires_grad_() for t in (q, d)]
        matryoshka_info_nce(*mine, dims, weights, 20.0).backward()
        out[rank] = [(t.grad / 2).numpy() for t in mine]
    finally:
        torch.distributed.destroy_process_group()
