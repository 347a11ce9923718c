"""Torch's thread count while a generator trains its own agents (minigrid-learned's PPO, mujoco-local's SAC)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Torch on one intra-op thread inside, as it was after: the same seed gives the same bytes on any machine
    (reductions split over threads may add in another order), and a generation takes one core."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
