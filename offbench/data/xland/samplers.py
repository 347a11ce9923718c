"""The `ad_windows` and `dpt` samplers of an XLand file: batches with the native samplers' keys, cut from
chunks read on demand (`ChunkReader`), nothing of the file read up front."""

from __future__ import annotations

import functools

import numpy as np
import torch

from offbench.data.samplers import _SeededSampler, register_store_sampler
from offbench.data.xland.codec import decode_states_as
from offbench.data.xland.histories import XLandHistories
from offbench.data.xland.reader import DEFAULT_CACHE_MB
from offbench.errors import OffbenchError


class _XLandSampler(_SeededSampler[XLandHistories]):
    """The chunk reader and observation decoding shared by the XLand samplers (same keys as the native ones;
    nothing of the file is read up front).

    Observations are float32 (the batch contract of every sampler) unless `observation_dtype="uint8"`, which
    gives the (tile, colour) codes as bytes, a quarter of the memory, for models that embed them (the XLand
    AD and DPT baselines do)."""

    def __init__(
        self,
        store: XLandHistories,
        batch_size: int,
        seed: int,
        device: str | torch.device,
        cache_mb: int,
        observation_dtype: str,
    ):
        if observation_dtype not in ("float32", "uint8"):
            raise OffbenchError(f"observation_dtype must be 'float32' or 'uint8', got '{observation_dtype}'")
        super().__init__(store, batch_size, seed, device)
        if int(cache_mb) < 1:
            raise OffbenchError(f"cache_mb must be at least 1, got {cache_mb}")
        self.observation_dtype = observation_dtype
        self.reader = store.reader(int(cache_mb) << 20)

    def observations(self, tasks: np.ndarray, histories: np.ndarray, steps: np.ndarray) -> torch.Tensor:
        return self.observation_tensor(self.reader.take("states", tasks, histories, steps))

    def observation_tensor(self, packed: np.ndarray) -> torch.Tensor:
        """(..., 5, 5) packed bytes -> (..., 5, 5, 2) (tile, colour) tensor of `observation_dtype`."""
        return self.tensor(decode_states_as(packed, self.observation_dtype))


@register_store_sampler("ad_windows", XLandHistories)
class XLandADWindowSampler(_XLandSampler):
    """T consecutive steps of one learning history (crossing episode boundaries), from an XLand file.

    Uniform over every full window of every (task, history), as the native `ad_windows`; the authors' AD
    loader instead cuts windows on a fixed grid (start 1 + k * T / 2). `task_ids` is the task group.
    A window of the published 4,096 steps touches at most two chunks per dataset.
    """

    kind = "ad_windows"

    def __init__(
        self,
        store: XLandHistories,
        batch_size: int,
        seed: int,
        device: str | torch.device = "cpu",
        *,
        window_length: int,
        cache_mb: int = DEFAULT_CACHE_MB,
        observation_dtype: str = "float32",
    ):
        super().__init__(store, batch_size, seed, device, cache_mb, observation_dtype)
        if not 1 <= int(window_length) <= store.steps:
            raise OffbenchError(f"{store.path}: window_length must be between 1 and the history length {store.steps}, got {window_length}")
        self.window_length = int(window_length)

    def sample(self) -> dict[str, torch.Tensor]:
        per_history = self.store.steps - self.window_length + 1
        draw = np.sort(self.rng.integers(0, self.store.num_histories * per_history, self.batch_size))
        history_index, first = np.divmod(draw, per_history)
        tasks, histories = np.divmod(history_index, self.store.histories)
        read = functools.partial(self.reader.windows, tasks=tasks, histories=histories, first=first, length=self.window_length)
        batch = {
            "observations": self.observation_tensor(read("states")),
            "actions": self.tensor(read("actions"), np.int64),
            "rewards": self.tensor(read("rewards"), np.float32),
        }
        batch["task_ids"] = self.tensor(tasks, np.int64)
        return batch


@register_store_sampler("dpt", XLandHistories)
class XLandDPTSampler(_XLandSampler):
    """(query state, in-context transitions, expert action) triples for DPT, from an XLand file.

    The label is `expert_actions[query]` (the final PPO policy's mode, relabelled by the authors). The
    context is C transitions of one history with s' = states[t + 1] of the same history (so t < T - 1;
    after a done that is the next episode's first observation: XLand does not store terminal ones).
    `context="window"`: C consecutive steps; `"random"`: C steps uniform with replacement, in time order.
    `group_by="task_id"` (default, as the authors' DPT loader): the query comes from an independently
    drawn history of the same task; `"history_id"`: from the context's own history.
    `label` is "optimal" only: the posterior label needs tabular tasks whose dynamics the card describes.
    """

    kind = "dpt"

    def __init__(
        self,
        store: XLandHistories,
        batch_size: int,
        seed: int,
        device: str | torch.device = "cpu",
        *,
        context_size: int,
        context: str = "window",
        group_by: str | None = None,
        label: str = "optimal",
        cache_mb: int = DEFAULT_CACHE_MB,
        observation_dtype: str = "float32",
    ):
        super().__init__(store, batch_size, seed, device, cache_mb, observation_dtype)
        if label != "optimal":
            raise OffbenchError(
                f"{store.path}: an XLand file has only the expert's labels (label = \"optimal\"), got '{label}'; the posterior label needs a tabular roll-in card"
            )
        if context not in ("window", "random"):
            raise OffbenchError(f"context must be 'window' or 'random', got '{context}'")
        group_by = group_by or "task_id"
        if group_by not in ("task_id", "history_id"):
            raise OffbenchError(f"group_by must be 'task_id' or 'history_id' for an XLand file, got '{group_by}'")
        if not 1 <= int(context_size) <= store.steps - 1:
            raise OffbenchError(
                f"{store.path}: context_size must be between 1 and {store.steps - 1} (steps with a next state), got {context_size}"
            )
        self.context_size, self.context, self.group_by = int(context_size), context, group_by

    def sample(self) -> dict[str, torch.Tensor]:
        b, c, steps = self.batch_size, self.context_size, self.store.steps
        tasks = self.rng.integers(0, self.store.num_tasks, b)
        histories = self.rng.integers(0, self.store.histories, b)
        query_histories = self.rng.integers(0, self.store.histories, b) if self.group_by == "task_id" else histories
        query = self.rng.integers(0, steps, b)[:, None]
        if self.context == "window":  # C consecutive steps; one read of C + 1 states gives s and s'
            first = self.rng.integers(0, steps - c, b)  # the last context step is at most T - 2
            read = functools.partial(self.reader.windows, tasks=tasks, histories=histories, first=first)
            states, actions, rewards = read("states", length=c + 1), read("actions", length=c), read("rewards", length=c)
            context_states, next_states = states[:, :-1], states[:, 1:]
        else:
            context = np.sort(self.rng.integers(0, steps - 1, (b, c)), axis=1)
            read = functools.partial(self.reader.take, tasks=tasks, histories=histories)
            context_states, next_states = read("states", steps=context), read("states", steps=context + 1)
            actions, rewards = read("actions", steps=context), read("rewards", steps=context)
        batch = {
            "query_observations": self.observations(tasks, query_histories, query)[:, 0],
            "context_observations": self.observation_tensor(context_states),
            "context_actions": self.tensor(actions, np.int64),
            "context_rewards": self.tensor(rewards, np.float32),
            "context_next_observations": self.observation_tensor(next_states),
            "optimal_actions": self.tensor(self.reader.take("expert_actions", tasks, query_histories, query)[:, 0], np.int64),
            "task_ids": self.tensor(tasks, np.int64),
        }
        return batch
