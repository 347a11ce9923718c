"""Training batches for every kind of baseline, cut from an EpisodeStore by vectorised index arithmetic.

    batches = sampler(store, "segments", batch_size=256, seed=0, segment_length=20)   # offbench.sampler
    batch = batches.sample()            # dict of torch tensors: the kinds and their keys are in `sampler`'s docstring
    state = batches.state_dict()        # numpy Generator state: a resumed run draws the same batches
    for batch in torch.utils.data.DataLoader(batches, batch_size=None): ...   # the same batches, endlessly

Nothing loops over episodes at sample time: the constructor precomputes small tables (episode offsets,
returns-to-go, group boundaries) and `sample()` draws B indices, builds an index matrix with NumPy
broadcasting and gathers rows from the contiguous arrays. Memory-mapped stores are gathered in place
(only the touched pages are read), so a dataset larger than RAM still samples.
"""

from __future__ import annotations

import copy
import inspect
import os
from abc import abstractmethod
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import torch

from offbench.data.store import EpisodeStore, InPlaceStore, Store
from offbench.errors import OffbenchError
from offbench.registry import lookup, register

S = TypeVar("S", bound=Store)

# ----------------------------------------------------------------------------- registry


class Sampler(Protocol):
    kind: str
    batch_size: int

    def sample(self) -> dict[str, torch.Tensor]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


SAMPLERS: dict[str, type] = {}
# (kind, store type) -> sampler, for datasets read in place that are not EpisodeStores (e.g. XLand files)
STORE_SAMPLERS: dict[tuple[str, type], type] = {}


register_sampler = partial(register, SAMPLERS)  # @register_sampler("kind"); the class says `kind` too


def register_store_sampler(kind: str, store: type) -> Callable[[type], type]:
    """@register_store_sampler("ad_windows", XLandHistories): the sampler of `kind` for a dataset type read in place
    (keyed by kind and type, where `offbench.registry.register` keys by name)."""

    def add(sampler_class: type) -> type:
        STORE_SAMPLERS[(kind, store)] = sampler_class
        return sampler_class

    return add


def make_sampler(
    kind: str, store: EpisodeStore | InPlaceStore, batch_size: int, seed: int, device: str | torch.device = "cpu", **opts: Any
) -> Sampler:
    """Build the sampler registered under `kind`; unknown kinds and options are one-line OffbenchErrors."""
    cls = lookup(SAMPLERS, kind, "sampler kind")
    if not isinstance(store, EpisodeStore):
        cls = STORE_SAMPLERS.get((kind, type(store)))
        if cls is None:
            kinds = sorted(k for k, store_type in STORE_SAMPLERS if store_type is type(store))
            raise OffbenchError(
                f"{getattr(store, 'path', 'this dataset')}: sampler '{kind}' cannot read it in place (kinds that can: {', '.join(kinds) or 'none'})"
            )
    params = inspect.signature(cls.__init__).parameters
    own = {name: p for name, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    unknown = sorted(set(opts) - set(own))
    if unknown:
        raise OffbenchError(f"sampler '{kind}' has no option {', '.join(unknown)} (options: {', '.join(own)})")
    missing = [name for name, p in own.items() if p.default is inspect.Parameter.empty and name not in opts]
    if missing:
        raise OffbenchError(f"sampler '{kind}' needs the option {', '.join(missing)}")
    return cls(store, batch_size, seed, device, **opts)


def sampler(dataset: Any, kind: str, *, batch_size: int, seed: int = 0, device: str | torch.device = "cpu", **options: Any) -> Sampler:
    """Batches of `kind` drawn from `dataset` (an EpisodeStore or XLandHistories from `offbench.load`, or a
    registered id or a path, opened as `offbench.load` opens it), seeded: `.sample()` gives the next batch, and the
    sampler is an endless torch IterableDataset, so `DataLoader(sampler, batch_size=None)` gives the same batches.

    Kinds, their options (default) and their batches (B = batch_size, every entry a tensor with B rows first):

    transitions      no options. observations (B,*obs), actions (B,*act), rewards (B,), next_observations (B,*obs),
                     terminals (B,): steps drawn uniformly; terminals is 1 only where the MDP terminated (a time
                     limit is 0) and s' after an episode's last step is its stored final observation.
    segments         segment_length=20. observations (B,K,*obs), actions (B,K,*act), rewards, returns_to_go,
                     timesteps (int64), mask (bool) (B,K): K steps of one episode ending at a uniform step,
                     left-padded (Decision Transformer).
    prompt_segments  segment_length=20, prompt_length=5, prompt_pool=5, one_task_per_batch=False. The segments'
                     keys plus prompt_{observations,actions,returns_to_go,timesteps,mask} and task_prompt_* (B,P,..):
                     the end of one of the row's task's best episodes (Prompt-DT). Needs a task_id column.
    ad_windows       window_length (required), task_pairs=False. observations (B,T,*obs), actions (B,T,*act),
                     rewards (B,T): T consecutive steps of one learning history, across episodes (Algorithm
                     Distillation). Needs a history_id column; a num_actions column (bandits of several arm
                     counts) adds num_actions (B,) int64, the actions of each window's task.
    dpt              context_size (required), context="window" | "random" | "shuffled", label="optimal" |
                     "posterior", task_pairs=False. query_observations (B,*obs): a state drawn uniformly over the environment's
                     states, independent of the context; context_{observations,actions,rewards,
                     next_observations} (B,C,..), optimal_actions (B,): the task's optimal action at the query;
                     "posterior" adds optimal_action_probabilities (B,C+1,A) (Decision-Pretrained Transformer).
                     Needs optimal_action and task_id columns and a card naming its offbench environment and
                     training tasks.

    Every kind adds task_ids (B,) int64 when the dataset has a task_id column. `task_pairs=True` (ad_windows,
    dpt) draws rows in same-task pairs, rows 2k and 2k + 1 (`TaskPairs`), for a contrastive loss whose
    positives are rows of one task (T2MIR's); an even batch_size and two or more tasks. Observations and rewards are
    float32; actions are int64 for integer (discrete) actions, float32 otherwise. An XLand file samples
    ad_windows and dpt in place (also cache_mb=512 and observation_dtype="float32" | "uint8"; dpt: group_by).
    Each sampler class's docstring says exactly how it draws.

    An unknown kind or option, or something that is not a dataset, is a one-line OffbenchError.
    """
    from offbench.data.resolve import resolve

    if isinstance(dataset, (str, os.PathLike)):
        dataset = resolve(os.fspath(dataset))
    readable = (EpisodeStore, *(store_type for _, store_type in STORE_SAMPLERS))
    if not isinstance(dataset, readable):
        raise OffbenchError(f"offbench.sampler samples a dataset (offbench.load's result, an id or a path), not a {type(dataset).__name__}")
    return make_sampler(kind, dataset, batch_size, seed, device, **options)


# ----------------------------------------------------------------------------- shared machinery


def _at_least_one(name: str, value: Any) -> int:
    """A sampler's count option (a batch size, a length) as an int, or one line naming it when it is below 1."""
    if int(value) < 1:
        raise OffbenchError(f"{name} must be at least 1, got {value}")
    return int(value)


class _SeededSampler(torch.utils.data.IterableDataset[dict[str, torch.Tensor]], Generic[S]):
    """What every sampler shares, whatever its dataset (`S`: the store type it reads): the seeded RNG, resume,
    endless iteration (DataLoader workers included) and tensor conversion."""

    kind: str

    def __init__(self, store: S, batch_size: int, seed: int, device: str | torch.device):
        self.store = store
        self.batch_size = _at_least_one("batch_size", batch_size)
        self.device = torch.device(device)
        self.rng = np.random.default_rng(seed)
        self.where = f"{store.path}: " if store.path else ""

    # -- resume
    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "rng": copy.deepcopy(self.rng.bit_generator.state)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != self.kind:
            raise OffbenchError(f"sampler state is for kind '{state.get('kind')}', not '{self.kind}'")
        self.rng.bit_generator.state = copy.deepcopy(state["rng"])

    @abstractmethod
    def sample(self) -> dict[str, torch.Tensor]:
        """The next batch, drawn as the sampler's kind draws."""

    # -- torch.utils.data
    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        """`sample()` forever: `DataLoader(sampler, batch_size=None)` yields what calling `sample()` would.

        In DataLoader workers (num_workers = n > 0) each worker holds a copy of the sampler, so worker k draws
        from its own stream, `np.random.default_rng(seed).spawn(k + 1)[k]` (NumPy's independent k-th child of the
        sampler's seed): batches differ across workers and repeat for the same seed and n. The workers start
        from the seed, not from a state loaded with `load_state_dict`, and this sampler's `state_dict()` does not
        follow them: for an exact resume, draw with num_workers=0. Workers build batches on the CPU."""
        worker = torch.utils.data.get_worker_info()
        if worker is not None:
            if self.device.type != "cpu":
                raise OffbenchError(
                    f"DataLoader workers build batches on the CPU; make the sampler with device='cpu' (not '{self.device}') and move batches in the training loop"
                )
            self.rng = self.rng.spawn(worker.num_workers)[worker.id]
        while True:
            yield self.sample()

    # -- for subclasses
    def tensor(self, array: np.ndarray, dtype: Any = None) -> torch.Tensor:
        """Zero-copy from NumPy (the gathered arrays are fresh and contiguous), then to the device."""
        array = np.ascontiguousarray(array if dtype is None else array.astype(dtype, copy=False))
        return torch.from_numpy(array).to(self.device)


class _StoreSampler(_SeededSampler[EpisodeStore]):
    """The arrays of an EpisodeStore and the s' lookup shared by every kind that samples one. Observations come in
    dataset units: baselines normalise them in their networks (offbench.baselines.nets.ObservationNormalizer)."""

    def __init__(self, store: EpisodeStore, batch_size: int, seed: int, device: str | torch.device):
        super().__init__(store, batch_size, seed, device)
        # np.asarray turns an np.memmap into a plain ndarray view of the same mapping: still lazy, but
        # indexing skips np.memmap's Python-level __getitem__/__array_finalize__.
        self.observations = np.asarray(store.observations)
        self.actions = np.asarray(store.actions)
        self.rewards = np.asarray(store.rewards)
        self.final_observations = np.asarray(store.final_observations)
        self.starts = store.episode_starts
        self.task_ids = np.asarray(store.columns["task_id"]) if "task_id" in store.columns else None
        self.action_dtype = np.int64 if self.actions.dtype.kind in "iub" else np.float32

    # -- helpers for subclasses
    def episode_of(self, index: np.ndarray) -> np.ndarray:
        """Episode of each step index (binary search over the E + 1 offsets; no per-step table)."""
        return np.searchsorted(self.starts, index, side="right") - 1

    def next_observations(self, index: np.ndarray) -> np.ndarray:
        """s' of each step: the following row inside an episode, the stored final observation at its end."""
        episode = self.episode_of(index)
        last = index + 1 == self.starts[episode + 1]
        nxt = self.gather(self.observations, np.minimum(index + 1, len(self.observations) - 1))
        if last.any():
            nxt[last] = self.final_observations[episode[last]]
        return nxt

    @staticmethod
    def gather(array: np.ndarray, index: np.ndarray) -> np.ndarray:
        """Rows of `array` at `index` (any shape). np.take is ~3x faster than array[index] for 2-D index."""
        return np.take(array, index, axis=0)

    def observation_array(self, obs: np.ndarray) -> np.ndarray:
        return obs.astype(np.float32, copy=False)

    def observation_tensor(self, obs: np.ndarray) -> torch.Tensor:
        return self.tensor(self.observation_array(obs))

    def step_tensors(self, index: np.ndarray, prefix: str = "", next_observations: bool = False) -> dict[str, torch.Tensor]:
        """Observations, actions, rewards (and s' if asked) of the steps at `index` (any shape), keys prefixed."""
        batch = {
            f"{prefix}observations": self.observation_tensor(self.gather(self.observations, index)),
            f"{prefix}actions": self.tensor(self.gather(self.actions, index), self.action_dtype),
            f"{prefix}rewards": self.tensor(self.gather(self.rewards, index), np.float32),
        }
        if next_observations:
            batch[f"{prefix}next_observations"] = self.observation_tensor(self.next_observations(index))
        return batch

    def with_task_ids(self, batch: dict[str, torch.Tensor], index: np.ndarray) -> dict[str, torch.Tensor]:
        if self.task_ids is not None:
            batch["task_ids"] = self.tensor(self.gather(self.task_ids, index), np.int64)
        return batch


def _contiguous_groups(values: np.ndarray, name: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Runs of equal values in a per-step column: (ids, bounds) with run g = rows [bounds[g], bounds[g+1]).

    Raises if one id appears in two separate runs (a learning history must stay contiguous)."""
    values = np.asarray(values)
    change = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = np.concatenate([[0], change, [len(values)]]).astype(np.int64)
    ids = values[bounds[:-1]]
    unique, counts = np.unique(ids, return_counts=True)
    if len(unique) != len(ids):
        raise OffbenchError(f"{where}{name} {unique[counts > 1][0]} is split into several separate runs of rows; it must be contiguous")
    return ids, bounds


class TaskPairs:
    """A batch's groups (learning histories, say) drawn in same-task pairs, for a contrastive loss whose positives are
    rows of one task (T2MIR's task router, as NJU-RL/T2MIR's `sample_batch_contrastive` draws its batches): rows 2k
    and 2k + 1 hold two groups of one task, two different ones where the task has several. The pairs' tasks are
    uniform and distinct while the dataset has at least as many tasks as the batch has pairs, else drawn with
    replacement (the reference's rule). Adjacent rows keep a pair whole when a batch is cut into even-sized shards."""

    def __init__(self, group_task: np.ndarray, batch_size: int, where: str):
        tasks, task_of_group = np.unique(group_task, return_inverse=True)
        if len(tasks) < 2:
            raise OffbenchError(
                f"{where}task_pairs contrasts pairs of rows of one task with the other tasks' rows, but this dataset has one "
                f"task ({tasks[0]}); turn task_pairs off"
            )
        if batch_size % 2:
            raise OffbenchError(f"task_pairs draws rows in pairs: batch_size must be even, got {batch_size}")
        self.pairs = batch_size // 2
        self.groups = np.argsort(task_of_group, kind="stable")  # group indices, task by task
        self.task_groups = np.bincount(task_of_group)  # groups per task
        self.task_first = np.concatenate([[0], np.cumsum(self.task_groups)[:-1]])  # each task's first place in `groups`

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """(B,) group indices: the pairs' tasks, then two places among each task's groups (distinct when it has two or more)."""
        tasks = len(self.task_groups)
        task = rng.choice(tasks, self.pairs, replace=self.pairs > tasks)
        count = self.task_groups[task]
        first = rng.integers(0, count)
        other = rng.integers(0, np.maximum(count - 1, 1))
        second = np.where(count > 1, other + (other >= first), first)
        return self.groups[(self.task_first[task][:, None] + np.stack([first, second], axis=1)).reshape(-1)]


def task_pairs_of(task_pairs: bool, store_task_ids: np.ndarray | None, group_rows: np.ndarray, batch_size: int, where: str, kind: str):
    """The `TaskPairs` of a sampler's groups (each group's task read at its row in `group_rows`), or None when off."""
    if not task_pairs:
        return None
    if store_task_ids is None:
        raise OffbenchError(f"{where}{kind} with task_pairs pairs rows of one task: the dataset has no 'task_id' column")
    return TaskPairs(np.asarray(store_task_ids)[group_rows], batch_size, where)


# ----------------------------------------------------------------------------- transitions


@register_sampler("transitions")
class TransitionSampler(_StoreSampler):
    """(s, a, r, s', terminal) drawn uniformly over all steps, for Q-learning and BC baselines.

    `terminals` is 1 only where the MDP terminated; a time-limit truncation is 0 so the critic
    bootstraps through it (D4RL's terminals-vs-timeouts rule), and s' at an episode's last step is the
    stored final observation, never the next episode's reset observation.
    """

    kind = "transitions"

    def __init__(self, store: EpisodeStore, batch_size: int, seed: int, device: str | torch.device = "cpu"):
        super().__init__(store, batch_size, seed, device)
        self.terminations = np.asarray(store.terminations)

    def sample(self) -> dict[str, torch.Tensor]:
        # Sorted indices read a memory-mapped file front to back; order inside a batch is irrelevant.
        index = np.sort(self.rng.integers(0, len(self.rewards), self.batch_size))
        batch = self.step_tensors(index, next_observations=True)
        batch["terminals"] = self.tensor(self.gather(self.terminations, index), np.float32)
        return self.with_task_ids(batch, index)


# ----------------------------------------------------------------------------- Decision Transformer segments


def returns_to_go(rewards: np.ndarray, episode_starts: np.ndarray) -> np.ndarray:
    """Undiscounted return from each step to its episode's end, for all steps at once (float64).

    A reverse cumulative sum restarted at every episode: with S the inclusive prefix sum,
    rtg[t] = S[last step of t's episode] - S[t] + r[t] (DT's `discount_cumsum(rewards, 1.0)`).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    prefix = np.cumsum(rewards)
    episode_total_prefix = np.repeat(prefix[episode_starts[1:] - 1], np.diff(episode_starts))
    return episode_total_prefix - prefix + rewards


@register_sampler("segments")
class SegmentSampler(_StoreSampler):
    """K-step segments for Decision Transformer, ending at a sampled step and LEFT-padded.

    Each segment ends at a step t and holds steps max(t-K+1, episode start) .. t; segments that would
    start before the episode are left-padded (zeros, mask False), so every step can be the last token
    and short contexts occur at episode starts, exactly as when the policy acts from a reset (this is
    d3rlpy's BasicTrajectorySlicer; the original DT code instead samples the first step and pads at
    the left when the segment runs past the episode end).

    t is uniform over all steps, i.e. an episode with probability proportional to its length, like DT's
    `p_sample = traj_lens / sum(traj_lens)` and CORL's `sample_prob`: long, usually good episodes are
    not under-weighted.

    rewards and returns_to_go are in dataset units (DT scales them itself: CORL's reward_scale);
    timesteps count from 0 at the episode's first step (padding: 0).
    """

    kind = "segments"

    def __init__(
        self,
        store: EpisodeStore,
        batch_size: int,
        seed: int,
        device: str | torch.device = "cpu",
        *,
        segment_length: int = 20,
    ):
        super().__init__(store, batch_size, seed, device)
        self.segment_length = _at_least_one("segment_length", segment_length)
        # rewards and returns-to-go side by side, so one gather fetches both (8 bytes a step)
        self.reward_and_rtg = np.stack([self.rewards.astype(np.float32), returns_to_go(self.rewards, self.starts)], axis=1).astype(
            np.float32
        )
        self.offsets = np.arange(1 - self.segment_length, 1, dtype=np.int64)

    def sample(self) -> dict[str, torch.Tensor]:
        last = self.rng.integers(0, len(self.rewards), self.batch_size)
        return self.segments(last)

    def segments(self, last: np.ndarray) -> dict[str, torch.Tensor]:
        """The batch of segments ending at steps `last`, rows in step order."""
        episode = self.episode_of(last)
        order = np.argsort(last, kind="stable")  # front-to-back reads on a memory-mapped file
        last, first = last[order], self.starts[episode[order]]
        steps = self.padded_steps(last[:, None] + self.offsets, first)
        batch = {key: self.tensor(value, np.int64 if key == "timesteps" else None) for key, value in steps.items()}
        return self.with_task_ids(batch, last)

    def padded_steps(self, index: np.ndarray, first: np.ndarray) -> dict[str, np.ndarray]:
        """Steps at `index` (N, L) of episodes starting at `first` (N,); slots before the episode are padding
        (zeros, mask False). Returns observations, actions, rewards, returns_to_go, timesteps (from 0 at the
        episode's first step) and mask, as NumPy arrays."""
        mask = index >= first[:, None]
        index = np.maximum(index, first[:, None])  # padded slots read the first step, then are zeroed
        pad = ~mask
        observations = self.observation_array(self.gather(self.observations, index))
        observations[pad] = 0.0
        actions = self.gather(self.actions, index).astype(self.action_dtype, copy=False)
        actions[pad] = 0
        reward_and_rtg = self.gather(self.reward_and_rtg, index)
        reward_and_rtg[pad] = 0.0
        return {
            "observations": observations,
            "actions": actions,
            "rewards": reward_and_rtg[..., 0],
            "returns_to_go": reward_and_rtg[..., 1],
            "timesteps": np.where(mask, index - first[:, None], 0),
            "mask": mask,
        }


@register_sampler("prompt_segments")
class PromptSegmentSampler(SegmentSampler):
    """`segments`, each with a Prompt-DT prompt (Xu et al. 2022): a short piece of a demonstration of its task.

    A task's demonstrations are its `prompt_pool` highest-return episodes (ties: the earlier episode). A prompt is
    `prompt_length` steps of one of them, from step max(0, T - prompt_length - 1) of its T steps, as HarmoDT's
    `get_prompt` cuts it (charleshsc/HarmoDT prompt_dt/prompt_utils.py): the end of the episode, where the task is
    solved. Each row's prompt comes from a demonstration drawn uniformly (Prompt-DT's stochastic prompt); each row
    also carries its task's evaluation prompt (from the task's best episode) under `task_prompt_*`, so the
    baseline keeps one per task with its state. Extra keys: prompt_{observations, actions, returns_to_go,
    timesteps, mask} and task_prompt_* (B, P, ..); returns-to-go are raw sums from the prompt step to the
    episode's end (dataset units, like the segments'); short episodes are left-padded (mask False).

    `one_task_per_batch`: batch k holds rows of the k-th task (task ids in turn, round robin: HarmoDT's one task
    per iteration), segment ends uniform over that task's steps.
    """

    kind = "prompt_segments"

    def __init__(
        self,
        store: EpisodeStore,
        batch_size: int,
        seed: int,
        device: str | torch.device = "cpu",
        *,
        segment_length: int = 20,
        prompt_length: int = 5,
        prompt_pool: int = 5,
        one_task_per_batch: bool = False,
    ):
        super().__init__(store, batch_size, seed, device, segment_length=segment_length)
        if self.task_ids is None:
            raise OffbenchError(f"{self.where}prompt_segments needs a 'task_id' column (a multi-task dataset); this dataset has none")
        self.prompt_length, prompt_pool = _at_least_one("prompt_length", prompt_length), _at_least_one("prompt_pool", prompt_pool)
        self.one_task_per_batch, self.batches = bool(one_task_per_batch), 0
        episode_task = np.asarray(self.task_ids)[self.starts[:-1]]
        self.tasks = np.unique(episode_task)
        returns = np.add.reduceat(self.rewards.astype(np.float64), self.starts[:-1])
        self.pools = np.zeros((int(self.tasks.max()) + 1, prompt_pool), np.int64)  # episode ids, best first (rows of ids present)
        for task in self.tasks:
            episodes = np.flatnonzero(episode_task == task)
            best_first = episodes[np.lexsort((episodes, -returns[episodes]))][:prompt_pool]
            self.pools[task] = np.resize(best_first, prompt_pool)  # a task with fewer episodes repeats its best
        self.task_steps = {int(t): np.flatnonzero(self.task_ids == t) for t in self.tasks} if one_task_per_batch else None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.batches = int(state["batches"])

    def prompts(self, episodes: np.ndarray) -> dict[str, np.ndarray]:
        """Prompt arrays (N, P, ..) cut from `episodes` (N,)."""
        first, end = self.starts[episodes], self.starts[episodes + 1]
        last = np.minimum(np.maximum(first, end - self.prompt_length - 1) + self.prompt_length, end) - 1
        steps = self.padded_steps(last[:, None] + np.arange(1 - self.prompt_length, 1), first)  # short episodes: left-padded
        return {key: value for key, value in steps.items() if key != "rewards"}

    def sample(self) -> dict[str, torch.Tensor]:
        if self.task_steps is not None:  # one_task_per_batch
            steps = self.task_steps[int(self.tasks[self.batches % len(self.tasks)])]
            batch = self.segments(steps[self.rng.integers(0, len(steps), self.batch_size)])
        else:
            batch = super().sample()
        self.batches += 1
        tasks = batch["task_ids"].cpu().numpy()
        chosen = self.pools[tasks, self.rng.integers(0, self.pools.shape[1], len(tasks))]
        for prefix, episodes in (("prompt_", chosen), ("task_prompt_", self.pools[tasks, 0])):
            for key, value in self.prompts(episodes).items():
                batch[prefix + key] = self.tensor(value, np.int64 if key == "timesteps" else None)
        return batch


# ----------------------------------------------------------------------------- Algorithm Distillation windows


@register_sampler("ad_windows")
class ADWindowSampler(_StoreSampler):
    """T consecutive steps of ONE learning history (`history_id` column), crossing episode boundaries.

    Algorithm Distillation learns the improvement operator from windows spanning several episodes of
    a source algorithm's history, so a window must never mix two histories. The window's first step
    is uniform over every valid position of every history (each full window equally likely). A dataset
    with a `num_actions` column (bandit histories of several arm counts) adds each window's num_actions (B,),
    its first step's (one history has one arm count).

    `task_pairs`: rows 2k and 2k + 1 are windows of one task (`TaskPairs`: two of its histories where it has
    several, else two windows of its one history, drawn independently), each uniform over its history's windows.
    """

    kind = "ad_windows"

    def __init__(
        self,
        store: EpisodeStore,
        batch_size: int,
        seed: int,
        device: str | torch.device = "cpu",
        *,
        window_length: int,
        task_pairs: bool = False,
    ):
        super().__init__(store, batch_size, seed, device)
        if "history_id" not in store.columns:
            raise OffbenchError(f"{self.where}ad_windows needs a 'history_id' column (learning histories); this dataset has none")
        self.window_length = _at_least_one("window_length", window_length)
        ids, bounds = _contiguous_groups(store.columns["history_id"], "history_id", self.where)
        lengths = np.diff(bounds)
        if lengths.min() < self.window_length:
            short = int(np.argmin(lengths))
            raise OffbenchError(
                f"{self.where}window_length {self.window_length} is longer than history {ids[short]} "
                f"({lengths[short]} steps, the shortest); every history must hold at least one full window, so at most {lengths[short]}"
            )
        windows = lengths - self.window_length + 1  # valid first steps per history
        self.history_first = bounds[:-1]
        self.windows_before = np.concatenate([[0], np.cumsum(windows)])
        self.offsets = np.arange(self.window_length, dtype=np.int64)
        self.num_actions = np.asarray(store.columns["num_actions"]) if "num_actions" in store.columns else None
        self.pairs = task_pairs_of(task_pairs, self.task_ids, self.history_first, self.batch_size, self.where, self.kind)

    def sample(self) -> dict[str, torch.Tensor]:
        if self.pairs is None:
            draw = np.sort(self.rng.integers(0, self.windows_before[-1], self.batch_size))
            history = np.searchsorted(self.windows_before, draw, side="right") - 1
            first = self.history_first[history] + (draw - self.windows_before[history])
        else:
            history = self.pairs.draw(self.rng)
            first = self.history_first[history] + self.rng.integers(0, np.diff(self.windows_before)[history])
        index = first[:, None] + self.offsets  # (B, T)
        batch = self.with_task_ids(self.step_tensors(index), first)
        if self.num_actions is not None:
            batch["num_actions"] = self.tensor(self.gather(self.num_actions, first), np.int64)
        return batch


# ----------------------------------------------------------------------------- DPT in-context sets


CONTEXT_SAMPLINGS = ("window", "random", "shuffled")
DPT_LABELS = ("optimal", "posterior")


@register_sampler("dpt")
class DPTSampler(_StoreSampler):
    """(query state, in-context dataset, optimal action) triples for Decision-Pretrained Transformer.

    Per sample: a group uniformly, C context transitions from that group's steps, and a query state drawn
    uniformly over the environment's states, independent of the context, labelled with the group's task's
    optimal action in it. That is the reference's draw (jon--lee/decision-pretrained-transformer
    `collect_data.py`: `query_state = env.sample_state()`, uniform over Dark Room's cells); a query taken from
    the group's own steps would sit where the history went, which for a learner that found its goal is the goal
    (37% of the queries on darkroom-ad-eps-fast, label: stay), a hint the evaluation never gives. The states, their
    observations and the tasks' optimal actions come from the card's environment and training tasks
    (offbench.generators.task_posterior.TaskStates: Dark Room's cells, Key-to-Door's cells with and without the
    key, a bandit's one state). The group is `history_id` when present, else `task_id`; its task is its rows'
    `task_id`. Group rows need not be contiguous: they are taken in time order within the group. The
    `optimal_action` column, the labels of the visited steps, is checked against the card's tasks on a sample
    of rows, so a card whose split does not describe its data is one line instead of wrong labels.

    `context="window"` (default) takes C consecutive steps of the group from a uniform start, i.e. a
    piece of the rollouts that built the task's data, in order, as in DPT's own Dark Room data where
    the context is a sequence of interaction. `context="random"` takes C steps uniformly with
    replacement, kept in time order (the DPT paper's bandit setting, where D is i.i.d. pulls).
    `context="shuffled"` takes C distinct steps of the group in a random order, drawn afresh per sample:
    where the group's steps are exchangeable (a roll-in of i.i.d. pulls), every order and every subset is
    a context of the same distribution, so the prefixes the loss trains on are new at each draw rather
    than the same C prefixes of one fixed sequence (which a small card lets the model memorise).

    `label="posterior"` adds `optimal_action_probabilities` (B, C + 1, A): for every prefix of the context, the
    distribution of the label given the query and that prefix under the card's training tasks
    (offbench.generators.task_posterior), for a roll-in card whose contexts ignore the task.

    `task_pairs`: rows 2k and 2k + 1 are groups of one task (`TaskPairs`: two different groups where the task has
    several, else its one group twice), each with its own context and query.
    """

    kind = "dpt"
    LABEL_CHECK_ROWS = 4096  # rows whose optimal_action the card's tasks must reproduce (evenly spaced over the file)

    def __init__(
        self,
        store: EpisodeStore,
        batch_size: int,
        seed: int,
        device: str | torch.device = "cpu",
        *,
        context_size: int,
        context: str = "window",
        label: str = "optimal",
        task_pairs: bool = False,
    ):
        super().__init__(store, batch_size, seed, device)
        if "optimal_action" not in store.columns:
            raise OffbenchError(f"{self.where}dpt needs an 'optimal_action' column (the query labels); this dataset has none")
        task_ids = self.task_ids
        if task_ids is None:
            raise OffbenchError(f"{self.where}dpt labels each query with its group's task: the dataset has no 'task_id' column")
        group_by = "history_id" if "history_id" in store.columns else "task_id"
        if context not in CONTEXT_SAMPLINGS:
            raise OffbenchError(f"context must be one of {', '.join(CONTEXT_SAMPLINGS)}, got '{context}'")
        context_size = _at_least_one("context_size", context_size)
        if label not in DPT_LABELS:
            raise OffbenchError(f"label must be one of {', '.join(DPT_LABELS)}, got '{label}'")
        self.context_size, self.context = context_size, context

        from offbench.generators.task_posterior import OptimalActionPosterior, TaskStates, training_env

        card = store.card or {}
        env = training_env(card, "dpt draws its query over the states of", self.where)
        self.tasks = TaskStates.of_env(env)
        self.posterior = OptimalActionPosterior.for_card(card, env, self.where) if label == "posterior" else None
        self.query_observations = self.observation_array(self.tasks.observations)
        self.check_labels(np.asarray(store.columns["optimal_action"]), task_ids, card.get("id", "?"))

        groups = np.asarray(store.columns[group_by])
        self.rows = np.argsort(groups, kind="stable")  # rows of each group, in time order
        sorted_groups = groups[self.rows]
        bounds = np.concatenate([[0], np.flatnonzero(sorted_groups[1:] != sorted_groups[:-1]) + 1, [len(groups)]])
        self.group_first, self.group_length = bounds[:-1], np.diff(bounds)
        self.group_task = np.asarray(self.task_ids)[self.rows[self.group_first]].astype(np.int64)
        if context != "random" and self.group_length.min() < self.context_size:
            short = int(np.argmin(self.group_length))
            raise OffbenchError(
                f"{self.where}context_size {self.context_size} is longer than {group_by} {sorted_groups[bounds[short]]} "
                f"({self.group_length[short]} steps, the shortest); {context} contexts of distinct steps need at most {self.group_length[short]}"
            )
        self.offsets = np.arange(self.context_size, dtype=np.int64)
        self.pairs = task_pairs_of(task_pairs, task_ids, self.rows[self.group_first], self.batch_size, self.where, self.kind)

    def check_labels(self, labels: np.ndarray, task_ids: np.ndarray, card_id: str) -> None:
        """The card's tasks give the stored labels on `LABEL_CHECK_ROWS` evenly spaced rows (task ids in range too)."""
        rows = np.unique(np.linspace(0, len(labels) - 1, min(len(labels), self.LABEL_CHECK_ROWS)).astype(np.int64))
        tasks = self.gather(task_ids, rows).astype(np.int64)
        num_tasks = len(self.tasks.optimal_actions)
        if tasks.min() < 0 or tasks.max() >= num_tasks:
            raise OffbenchError(
                f"{self.where}task_id {tasks.max() if tasks.max() >= num_tasks else tasks.min()} is not one of "
                f"card {card_id}'s {num_tasks} training tasks"
            )
        try:
            expected = self.tasks.optimal_actions[tasks, self.tasks.states(self.gather(self.observations, rows))]
        except OffbenchError as error:
            raise OffbenchError(f"{self.where}{error}") from None
        wrong = np.flatnonzero(expected != self.gather(labels, rows))
        if len(wrong):
            row = int(rows[wrong[0]])
            raise OffbenchError(
                f"{self.where}optimal_action[{row}] = {labels[row]}, but task {tasks[wrong[0]]} of card {card_id} "
                f"has {expected[wrong[0]]} there: the card's training tasks do not describe this data"
            )

    def sample(self) -> dict[str, torch.Tensor]:
        group = self.rng.integers(0, len(self.group_first), self.batch_size) if self.pairs is None else self.pairs.draw(self.rng)
        first, length = self.group_first[group], self.group_length[group]
        if self.context == "window":
            position = self.rng.integers(0, length - self.context_size + 1)[:, None] + self.offsets
        elif self.context == "shuffled":  # the first C of a uniform random order of each group's steps
            keys = self.rng.random((self.batch_size, int(length.max())))
            keys[np.arange(keys.shape[1]) >= length[:, None]] = np.inf
            position = np.argsort(keys, axis=1)[:, : self.context_size]
        else:
            position = np.sort(self.rng.integers(0, length[:, None], (self.batch_size, self.context_size)), axis=1)
        context = self.rows[first[:, None] + position]  # (B, C) step indices
        query = self.rng.integers(0, self.tasks.num_states, self.batch_size)  # tabular states, as env.sample_state()
        labels = self.tasks.optimal_actions[self.group_task[group], query]
        batch = {
            "query_observations": self.tensor(self.query_observations[query]),
            **self.step_tensors(context, prefix="context_", next_observations=True),
            "optimal_actions": self.tensor(labels),
        }
        if self.posterior is not None:
            batch["optimal_action_probabilities"] = self.tensor(
                self.posterior.probabilities(
                    self.tasks.observations[query],
                    self.gather(self.observations, context),
                    self.gather(self.actions, context),
                    self.gather(self.rewards, context),
                    labels,
                )
            )
        return self.with_task_ids(batch, self.rows[first])
