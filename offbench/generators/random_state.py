"""The process-wide random states a stable-baselines3 run draws from (Python's, NumPy's global one, torch's), taken
at a checkpoint and set again on resuming, so a resumed run draws what the unbroken run would have. JSON-able parts
and arrays apart: a checkpoint keeps the first in a JSON file and the second in an npz, neither a pickle."""

from __future__ import annotations

import random
from typing import Any

import numpy as np


def global_random_state() -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    import torch

    version, words, gauss = random.getstate()
    numpy_state = np.random.get_state(legacy=False)
    state = {
        "python_random": [version, list(words), gauss],
        "numpy_global": {**numpy_state, "state": {"pos": int(numpy_state["state"]["pos"])}},
    }
    return state, {"numpy_global_key": numpy_state["state"]["key"], "torch": torch.get_rng_state().numpy()}


def set_global_random_state(state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    import torch

    version, words, gauss = state["python_random"]
    random.setstate((version, tuple(words), gauss))
    numpy_state = state["numpy_global"]
    np.random.set_state({**numpy_state, "state": {**numpy_state["state"], "key": arrays["numpy_global_key"]}})
    torch.set_rng_state(torch.from_numpy(arrays["torch"]))
