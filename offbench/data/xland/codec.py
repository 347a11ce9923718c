"""XLand-MiniGrid's constants and the state codec: a view cell is stored as one byte, tile * NUM_COLORS + colour,
and handed to models as (tile, colour), as `np.divmod(states, NUM_COLORS)` in the authors' loaders."""

from __future__ import annotations

import numpy as np

from offbench.errors import OffbenchError

NUM_TILES = 13  # xminigrid.core.constants
NUM_COLORS = 12
NUM_ACTIONS = 6
VIEW = (5, 5)  # the agent's view in every XLand-MiniGrid environment the datasets use


def decode_states(packed: np.ndarray) -> np.ndarray:
    """(..., 5, 5) packed bytes -> (..., 5, 5, 2) (tile, colour), the observation XLand-MiniGrid returns."""
    return np.stack(np.divmod(packed, NUM_COLORS), axis=-1)


def decode_states_as(packed: np.ndarray, dtype: str) -> np.ndarray:
    """`decode_states(packed).astype(dtype)` for float32 or uint8, without int64 temporaries (the fast path)."""
    tiles = packed // NUM_COLORS
    colours = packed - tiles * NUM_COLORS
    if dtype == "uint8":
        return np.stack([tiles, colours], axis=-1)
    out = np.empty(packed.shape + (2,), np.float32)
    out[..., 0], out[..., 1] = tiles, colours
    return out


def encode_states(observations: np.ndarray) -> np.ndarray:
    """Inverse of `decode_states` (the collection code's `compress_obs`)."""
    observations = np.asarray(observations)
    return (observations[..., 0] * NUM_COLORS + observations[..., 1]).astype(np.uint8)


def max_episode_steps(env_id: str) -> int:
    """XLand-MiniGrid's default time limit, 3 * height * width (`EnvParams.max_steps` unset)."""
    try:
        height, width = (int(n) for n in env_id.rsplit("-", 1)[1].split("x"))
    except (IndexError, ValueError):
        raise OffbenchError(f"'{env_id}' is not an XLand-MiniGrid id of the form XLand-MiniGrid-R<k>-<H>x<W>") from None
    return 3 * height * width
