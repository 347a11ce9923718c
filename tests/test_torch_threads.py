"""The generators' one-thread block: torch on one thread inside, the caller's count back after, errors included."""

import pytest
import torch

from offbench.generators.torch_threads import one_torch_thread


def test_one_torch_thread_inside_and_the_callers_count_after_even_on_an_error():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_torch_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), one_torch_thread():
            raise RuntimeError("a generator that fails")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
