"""Small files in the published XLand layout, for tests and benchmarks (no real dataset needed)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from offbench.data.xland.codec import NUM_ACTIONS, NUM_COLORS, NUM_TILES, VIEW, max_episode_steps
from offbench.utils import atomic_path


def write_xland_file(
    path: str | Path,
    tasks: int,
    histories: int,
    steps: int,
    seed: int = 0,
    env_id: str = "XLand-MiniGrid-R1-9x9",
    benchmark_id: str = "trivial-1m",
    chunk_steps: int = 4096,
    palette: int | None = 64,
) -> Path:
    """Write a synthetic file in the published layout (combine.py's create_dataset arguments: gzip 6,
    chunks (1, chunk_steps, ...)), for tests and benchmarks. With a `palette`, views come from that many
    per task and repeat in runs, and episodes end every `max_episode_steps(env_id)` steps or earlier, so
    the bytes compress roughly like real histories; `palette=None` draws every view afresh."""
    rng = np.random.default_rng(seed)
    limit = max_episode_steps(env_id)
    with atomic_path(Path(path)) as tmp, h5py.File(tmp, "w") as f:
        for task in range(tasks):
            if palette is None:
                states = rng.integers(0, NUM_TILES * NUM_COLORS, (histories, steps, *VIEW), dtype=np.uint8)
            else:
                views = rng.integers(0, NUM_TILES * NUM_COLORS, (palette, *VIEW), dtype=np.uint8)
                keep = rng.random((histories, steps)) < 0.7  # the view often stays the same for a step
                states = views[np.cumsum(np.where(keep, 0, rng.integers(1, palette, (histories, steps))), axis=1) % palette]
            dones = np.zeros((histories, steps), bool)
            for h in range(histories):
                ends = np.cumsum(rng.integers(limit // 4, limit + 1, steps // (limit // 4) + 1)) - 1
                dones[h, ends[ends < steps]] = True
            rewards = np.where(dones & (rng.random((histories, steps)) < 0.5), rng.uniform(0.1, 1.0, (histories, steps)), 0.0)
            data = {
                "states": states,
                "actions": rng.integers(0, NUM_ACTIONS, (histories, steps), dtype=np.uint8),
                "rewards": rewards.astype(np.float16),
                "dones": dones,
                "expert_actions": rng.integers(0, NUM_ACTIONS, (histories, steps), dtype=np.uint8),
            }
            group = f.create_group(str(task))
            group.attrs["env-id"] = env_id
            group.attrs["benchmark-id"] = benchmark_id
            group.attrs["ruleset-id"] = np.int64(task)
            for name, array in data.items():
                group.create_dataset(name, data=array, compression="gzip", compression_opts=6, chunks=(1, chunk_steps, *array.shape[2:]))
    return Path(path)
