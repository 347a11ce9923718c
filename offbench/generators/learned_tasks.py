"""Multi-task offline data from learning agents: one stable-baselines3 agent per task, kept at checkpoints.

Published sub-optimal data (D4RL's medium and medium-replay, MTDiff's Meta-World sets) is the experience of
worse *policies*: coherent trajectories a learning agent produced, not an expert with per-step random actions.
This module makes such data for a multi-task suite; a `Learner` says which agent learns (PPO for MiniGrid in
`minigrid_learned`, SAC for Meta-World in `metaworld_learned`), the rest is shared.

Per task, the learner's agent (the same settings for every task, on one CPU thread) learns the task's environment
from the card's [env] table, seeded from the recipe's seed and the task's *name*, so a task trains alike in every
suite that holds it. Its training episodes reset to seeds of their own (`episode_seed(seed, task, TRAINING + 1 +
k)`), apart from the evaluation episodes. Before training and every `checkpoint_every` steps the policy plays
`eval_episodes` episodes (reset seeds `episode_seed(seed, task, e)`, e = 0, 1, ...; actions sampled from the
policy, each episode from a stream seeded by its reset seed): their success rate is the checkpoint's. The recipe's
`quality`:

  medium   training stops at the first trained checkpoint (one after the agent's first update) that reaches the
           band's lower edge; of the trained checkpoints so far, the one nearest `target_success` (the last, where
           none succeeded at all) plays `episodes_per_task` episodes (reset seeds e = 0, 1, ..., so its evaluation
           episodes are the first ones)
  replay   the same run and checkpoint; the data is every training episode that ended by that checkpoint, in the
           order they ended (D4RL's medium-replay): the agent's own actions, from its first, untrained policy on
  expert   training runs all its `timesteps`; the final policy plays `episodes_per_task` episodes

The card records every task's checkpoints (steps, success) and which one acted; `task_stats` the data's own
success. Resumable per task: each finished task is a shard in a work folder beside the output (as the
multi-task collection's), and a rerun trains only the tasks without one. Within a task, a checkpoint at which every
training environment has just started an episode (Meta-World's 500-step episodes: every checkpoint; MiniGrid's PPO
lanes end their episodes apart, so rarely) also writes a snapshot: weights and optimisers, random states, the
environments' reset counts, and the replay-buffer rows and training episodes since the last one. A killed run goes on
from its last snapshot and makes the bytes an unbroken run makes. Same seed, same bytes.

A finished task's run (its checkpoints' success and acting weights, and for medium and replay the training
episodes) is kept under $OFFBENCH_HOME/work/<generator>/runs/, keyed by what determines it (`run_key`: the task,
the seed, the agent's settings, timesteps, checkpoint_every, eval_episodes and the stop), so a medium and a replay
card of one suite, or of suites sharing a task, train it once; the next recipe only replays or collects. A task's
run is looked up or trained under its lock (`work_lock`): a process that wants a run another one is training goes on
to its next task and comes back to that one last (waiting for it then, and reusing it), so processes preparing two
cards of one suite train different tasks side by side.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Literal, Protocol, Sequence

import gymnasium as gym
import numpy as np

from offbench.envs.multitask import EnvPool, Lane, episode_seed, task_names
from offbench.errors import OffbenchError
from offbench.evaluation.lanes import run_lanes
from offbench.generators.multitask import _claim_work_dir, _npz_bytes, task_stats
from offbench.generators.random_state import global_random_state, set_global_random_state
from offbench.generators.sb3_logging import without_log_folders
from offbench.generators.torch_threads import one_torch_thread
from offbench.generators.work_lock import held_elsewhere, work_lock
from offbench.paths import work_dir
from offbench.records import Invalid, ranged, to_dict
from offbench.utils import atomic_dir, atomic_write_bytes, progress_bar

TRAINING = 1 << 40  # episode indices from here on seed the agent and its training episodes, never an evaluation's
ROUND = 64  # episodes played together, one batched policy call per step


class Learner(Protocol):
    """One kind of learning agent: how it is built, which of its weights act, and how it samples actions."""

    algorithm: str  # the card's name for it: "PPO", "SAC"
    n_envs: int  # parallel training environments
    learning_starts: int  # environment steps before its first update: a checkpoint up to them holds the untrained policy
    action_dtype: type  # the data's action column: np.int64 (discrete) or np.float32
    settings: dict[str, Any]  # its hyper-parameters, recorded in the card's behaviour

    def model(self, vec_env, seed: int) -> Any:
        """A fresh agent on `vec_env`, seeded."""
        ...

    def acting_weights(self, model) -> dict[str, Any]:
        """A copy of the weights that choose actions (a checkpoint keeps only these)."""
        ...

    def load_acting_weights(self, model, weights: dict[str, Any]) -> None: ...

    def sampled_policy(self, model, lanes: Sequence[Lane]) -> Any:
        """A batch `Policy` that samples the agent's actions, each lane from a stream seeded by its reset seed."""
        ...


@dataclass(frozen=True)
class LearnedParams:
    """A card's `[source.recipe.params]`, what every learned generator shares; each generator's subclass declares
    `suite`, `timesteps` and `checkpoint_every` again with its suites, its defaults and its agent's rollout."""

    rollout_steps: ClassVar[int] = 1  # the agent learns in rollouts of this many steps: checkpoints fall on their multiples

    suite: str = ranged("", doc="The suite whose tasks are learned.")
    tasks: list[str] | None = ranged(None, doc="Some of the suite's tasks (default: all of them).")
    quality: Literal["medium", "replay", "expert"] = ranged("medium", doc="Which policy's data (module docstring).")
    episodes_per_task: int | None = ranged(
        None,
        ge=1,
        doc="medium, expert: episodes the chosen policy plays per task (1000 "
        "when left out); replay has every training episode up to its checkpoint.",
    )
    timesteps: int = ranged(1, ge=1, doc="The most training steps per task (all of them for expert).")
    checkpoint_every: int = ranged(1, ge=1, doc="Training steps between checkpoints.")
    eval_episodes: int = ranged(50, ge=1, doc="Episodes that measure a checkpoint's success rate.")
    target_success: float = ranged(0.5, ge=0, le=1, doc="medium, replay: the success rate the chosen checkpoint is nearest.")
    band: tuple[float, float] = ranged(
        (0.4, 0.6),
        ge=0,
        le=1,
        doc="medium, replay: training stops at the first trained checkpoint reaching band[0]; the card states the band.",
    )
    lane_seeds: Literal["per-lane", "last-lane"] = ranged(
        "per-lane",
        doc="How the agent's parallel training environments draw their reset seeds: 'per-lane', each lane its own "
        "sequence; 'last-lane', every lane the last lane's sequence, as the generator did by mistake before commit 9ec811a (a "
        "late-bound loop variable). The pinned MiniGrid medium and replay cards were made so and keep it, to stay re-makeable.",
    )

    def check(self) -> None:
        if self.checkpoint_every % self.rollout_steps:
            raise Invalid(
                f"'checkpoint_every' must be a multiple of the agent's rollout of {self.rollout_steps} steps, got {self.checkpoint_every}"
            )
        if self.timesteps % self.checkpoint_every:
            raise Invalid(f"'timesteps' must be a multiple of checkpoint_every ({self.checkpoint_every}), got {self.timesteps}")
        if not self.band[0] <= self.target_success <= self.band[1]:
            raise Invalid(f"'band' must hold target_success {self.target_success}, got {list(self.band)}")
        if self.quality == "replay" and self.episodes_per_task is not None:
            raise Invalid("'episodes_per_task' does not apply to replay, whose episodes are the agent's training episodes")


@dataclass(frozen=True)
class LearnedRecipe:
    """Everything that determines the data: the generator, its agent, the params, the seed, the [env] table."""

    generator: str
    learner: Learner
    params: LearnedParams
    seed: int
    env: dict[str, Any]

    @property
    def names(self) -> list[str]:
        return task_names(self.env)

    @property
    def episodes_per_task(self) -> int:
        return self.params.episodes_per_task or 1000

    def behaviour(self) -> dict[str, Any]:
        """What acted, for the card (and the work folder's fingerprint: another library version is another recipe)."""
        from importlib.metadata import version

        p = self.params
        record = {
            "algorithm": self.learner.algorithm,
            "library": f"stable-baselines3 {version('stable-baselines3')}",
            "n_envs": self.learner.n_envs,
            **self.learner.settings,
            "timesteps": p.timesteps,
            "checkpoint_every": p.checkpoint_every,
            "eval_episodes": p.eval_episodes,
        }
        if p.quality != "expert":
            record.update(target_success=p.target_success, band=list(p.band))
        if p.lane_seeds != "per-lane":  # recorded only where it is not the default, so the default's run keys stay those of before
            record["lane_seeds"] = p.lane_seeds
        return record

    def fingerprint(self) -> str:
        return json.dumps(
            {"params": to_dict(self.params), "seed": self.seed, "env": self.env, "behaviour": self.behaviour()}, sort_keys=True
        )


class SampledLanes:
    """The part of a learner's batch `Policy` that keeps one random stream per lane, seeded by the lane's reset seed,
    so what an episode plays does not depend on the rows' random draws around it; subclasses sample their actions."""

    def __init__(self, lanes: Sequence[Lane]):
        self.rngs = [np.random.default_rng([lane.seed, 2]) for lane in lanes]

    def reset(self, num_envs: int) -> None:
        pass

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        pass

    def drop(self, keep: np.ndarray) -> None:
        self.rngs = [rng for rng, kept in zip(self.rngs, keep) if kept]


def choose_checkpoint(successes: Sequence[float], quality: str, target: float, first_trained: int = 1) -> int:
    """The acting checkpoint: expert's last; otherwise, of the trained ones (from `first_trained` on: the first
    checkpoint's policy, and SAC's up to `learning_starts`, have never been updated and act at random), the one nearest
    the target success, the earliest of a tie. Where no trained checkpoint succeeded at all there is no success to be
    near, and the earliest would be a policy that has barely learned: the last, most trained one acts, and replay
    keeps the whole run."""
    trained = range(max(first_trained, 1), len(successes))
    if quality == "expert" or not any(successes[i] > 0 for i in trained):
        return len(successes) - 1
    return min(trained, key=lambda i: (abs(successes[i] - target), i))


class TrainingEpisodes(gym.Wrapper):
    """One of the agent's training environments: its k-th reset takes `seed_of(k)` (the seed stable-baselines3
    passes is ignored, so every training episode's start is known) and, when recording, every finished episode is
    kept with the environment step it ended at."""

    def __init__(self, env: gym.Env, seed_of: Callable[[int], int], record: bool):
        super().__init__(env)
        self.seed_of, self.record = seed_of, record
        self.resets = self.steps = self.episode_steps = 0
        self.finished: list[tuple[int, dict[str, Any]]] = []
        self.episode: dict[str, Any] = {}

    def reset(self, *, seed=None, options=None):
        reset_seed = self.seed_of(self.resets)
        self.resets, self.episode_steps = self.resets + 1, 0
        obs, info = self.env.reset(seed=reset_seed, options=options)
        if self.record:
            self.episode = {
                "seed": reset_seed,
                "observations": [obs],
                "actions": [],
                "rewards": [],
                "terminations": [],
                "truncations": [],
                "step_success": [],
            }
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps, self.episode_steps = self.steps + 1, self.episode_steps + 1
        if self.record:
            for key, value in (
                ("observations", obs),
                ("actions", np.array(action)),  # a copy: the agent may reuse its action buffer
                ("rewards", reward),
                ("terminations", terminated),
                ("truncations", truncated),
                ("step_success", bool(info.get("success", False))),
            ):
                self.episode[key].append(value)
            if terminated or truncated:
                self.finished.append((self.steps, self.episode))
        return obs, reward, terminated, truncated, info


@dataclass(frozen=True)
class Checkpoint:
    timesteps: int
    success: float
    weights: dict[str, Any]  # the acting weights' state_dict at that point


class TaskAgent:
    """The recipe's agent on one task: its checkpoints as it trains, the episodes a checkpoint plays, the training
    episodes."""

    def __init__(self, recipe: LearnedRecipe, task_id: int, record: bool):
        from stable_baselines3.common.vec_env import DummyVecEnv

        from offbench.envs.factory import make_env

        self.recipe, self.task_id, self.name = recipe, task_id, recipe.names[task_id]
        self.learner = recipe.learner
        seed, name, n_envs = recipe.seed, self.name, self.learner.n_envs
        shared = recipe.params.lane_seeds == "last-lane"
        self.envs = [
            TrainingEpisodes(
                make_env(recipe.env, task_id),
                lambda k, j=(n_envs - 1 if shared else j): episode_seed(seed, name, TRAINING + 1 + j + n_envs * k),
                record,
            )
            for j in range(n_envs)
        ]
        self.vec_env = DummyVecEnv([lambda env=env: env for env in self.envs])
        self.model = without_log_folders(self.learner.model(self.vec_env, episode_seed(seed, name, TRAINING) % 2**32))
        self.pool = EnvPool(recipe.env)
        self.snapshots = snapshots_dir(recipe, task_id)

    def checkpoints(self, resumed: bool = False) -> Iterator[Checkpoint]:
        """The untrained policy's checkpoint (unless `resumed`: the snapshot had it), then one every
        `checkpoint_every` steps up to `timesteps`."""
        params = self.recipe.params
        lanes = self.lanes(params.eval_episodes)
        if not resumed:
            yield self.checkpoint(lanes)
        while self.model.num_timesteps < params.timesteps:
            self.model.learn(params.checkpoint_every, reset_num_timesteps=False)
            yield self.checkpoint(lanes)

    def checkpoint(self, lanes: Sequence[Lane]) -> Checkpoint:
        """The current policy's success over the evaluation lanes, and its acting weights."""
        results = self.play(lanes, record=False)
        success = float(np.mean([result["success"] for result in results]))
        return Checkpoint(self.model.num_timesteps, success, self.learner.acting_weights(self.model))

    def play(self, lanes: Sequence[Lane], record: bool, weights: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Episodes of the current policy (or of `weights`), sampled, as `run_lanes` returns them."""
        if weights is not None:
            self.learner.load_acting_weights(self.model, weights)
        return run_lanes(self.pool, lanes, lambda round_lanes, envs: self.learner.sampled_policy(self.model, round_lanes), ROUND, record)

    def ended_episodes(self) -> list[tuple[int, dict[str, Any]]]:
        """Every recorded training episode, in the order they ended, with the run's timesteps when it ended."""
        ended = sorted((step, j, episode) for j, env in enumerate(self.envs) for step, episode in env.finished)
        return [(step * self.learner.n_envs, episode) for step, _, episode in ended]

    def at_episode_starts(self) -> bool:
        """Whether training has begun and every training environment has just started an episode: a snapshot then
        keeps no simulator state, since each environment's reset seed makes it again."""
        return self.model.num_timesteps > 0 and all(env.episode_steps == 0 for env in self.envs)

    def lanes(self, episodes: int) -> list[Lane]:
        return [Lane(self.task_id, e, episode_seed(self.recipe.seed, self.name, e)) for e in range(episodes)]

    def close(self) -> None:
        self.vec_env.close()
        self.pool.close()


def train(agent: TaskAgent, advance: Callable[..., None]) -> list[Checkpoint]:
    """Train until the recipe's stop: the first trained checkpoint reaching the band's lower edge (medium, replay)
    or `timesteps` (expert), from the task's last snapshot if a killed run left one. `advance(steps,
    success=...)` hears of each checkpoint."""
    params, folder = agent.recipe.params, agent.snapshots
    checkpoints = restore_snapshots(agent, folder)
    if checkpoints:
        advance(checkpoints[-1].timesteps, success=f"{agent.name} resumed at step {checkpoints[-1].timesteps:,}")
    saved = len(checkpoints)
    for checkpoint in agent.checkpoints(resumed=bool(checkpoints)):
        checkpoints.append(checkpoint)
        advance(params.checkpoint_every if checkpoint.timesteps else 0, success=f"{agent.name} {checkpoint.success:.2f}")
        if params.quality != "expert" and checkpoint.timesteps > agent.learner.learning_starts and checkpoint.success >= params.band[0]:
            break
        if checkpoint.timesteps < params.timesteps and agent.at_episode_starts():
            write_snapshot(agent, folder, checkpoints, saved)
            saved = len(checkpoints)
    return checkpoints


def first_trained(timesteps: np.ndarray, learner: Learner) -> int:
    """The index of the first checkpoint whose policy has been updated: after the learner's `learning_starts`
    (SAC's 10,000 random steps make its 10,000-step checkpoint the untrained policy again)."""
    return int(np.searchsorted(timesteps, learner.learning_starts, side="right"))


def stops_at_band(params: LearnedParams) -> bool:
    """medium and replay stop training at the band; expert trains all its timesteps."""
    return params.quality != "expert"


@dataclass(frozen=True)
class TaskRun:
    """One task's finished run, all that medium and replay data are made from: every checkpoint's steps and
    success, the weights of the checkpoints that may act, and (runs stopped at the band) every training episode that
    ended by the last checkpoint, as `episode_arrays` columns (task 0) with the timesteps at which each ended."""

    timesteps: np.ndarray
    success: np.ndarray
    weights: dict[int, dict[str, Any]]
    training: dict[str, np.ndarray] | None

    def training_episodes(self, timesteps: int, task_id: int) -> dict[str, np.ndarray] | None:
        """The training episodes that ended within the first `timesteps` steps as the task's columns; None if none did."""
        if self.training is None:
            return None
        count = int(np.searchsorted(self.training["ended_at"], timesteps, side="right"))
        if count == 0:
            return None
        rows = int(self.training["lengths"][:count].sum())
        per_episode = ("final_observations", "lengths")
        columns = {key: self.training[key][:count] if key in per_episode else self.training[key][:rows] for key in EPISODE_KEYS}
        return {**columns, "task_id": np.full(rows, task_id, dtype=np.int64)}

    def to_bytes(self) -> bytes:
        arrays = {"checkpoint_timesteps": self.timesteps, "checkpoint_success": self.success}
        for index, state in self.weights.items():
            arrays.update({f"weights/{index}/{name}": tensor.numpy() for name, tensor in state.items()})
        arrays.update({f"training/{key}": values for key, values in (self.training or {}).items()})
        return _npz_bytes(arrays)

    @classmethod
    def from_bytes(cls, data: bytes) -> TaskRun:
        import torch

        with np.load(io.BytesIO(data), allow_pickle=False) as saved:
            arrays = {key: saved[key] for key in saved.files}
        weights: dict[int, dict[str, Any]] = {}
        training: dict[str, np.ndarray] = {}
        for key, values in arrays.items():
            if key.startswith("weights/"):
                _, index, name = key.split("/", 2)
                weights.setdefault(int(index), {})[name] = torch.from_numpy(values)
            elif key.startswith("training/"):
                training[key.removeprefix("training/")] = values
        return cls(arrays["checkpoint_timesteps"], arrays["checkpoint_success"], weights, training or None)


def run_key(recipe: LearnedRecipe, task_id: int) -> dict[str, Any]:
    """What a task's run depends on (torch's version too: its kernels train it): not the suite or the task's place in
    it, nor what is made of the run."""
    import torch

    params = recipe.params
    behaviour = {key: value for key, value in recipe.behaviour().items() if key not in ("target_success", "band")}
    return {
        "task": recipe.names[task_id],
        "seed": recipe.seed,
        "env": {"suite": recipe.env["suite"], "kwargs": {k: v for k, v in recipe.env["kwargs"].items() if k != "tasks"}},
        **behaviour,
        "torch": torch.__version__,
        "stop_at": list(params.band) if stops_at_band(params) else "timesteps",
    }


def run_path(recipe: LearnedRecipe, task_id: int) -> Path:
    """The task's run in the cache: $OFFBENCH_HOME/work/<generator>/runs/<task>-s<seed>-<hash of run_key>.npz."""
    key = hashlib.sha256(json.dumps(run_key(recipe, task_id), sort_keys=True).encode()).hexdigest()[:16]
    return work_dir(recipe.generator) / "runs" / f"{recipe.names[task_id]}-s{recipe.seed}-{key}.npz"


def snapshots_dir(recipe: LearnedRecipe, task_id: int) -> Path:
    """Where the task's run in progress keeps its snapshots: beside its cache file, as <run>.snapshots/<step>/."""
    path = run_path(recipe, task_id)
    return path.with_name(f"{path.stem}.snapshots")


REPLAY_ARRAYS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


def write_snapshot(agent: TaskAgent, folder: Path, checkpoints: list[Checkpoint], saved: int) -> None:
    """Keep what resuming here needs, in a folder of its own written by one rename: the weights of the model and its
    optimisers, the random states, each environment's resets and steps, and what came since the last snapshot (the
    checkpoints after the first `saved`, the replay buffer's new rows, the training episodes recorded since)."""
    import torch

    model, n_envs = agent.model, agent.learner.n_envs
    step, start = model.num_timesteps, checkpoints[saved - 1].timesteps if saved else 0
    _, variables = model._get_torch_save_params()
    tensors = {
        "parameters": model.get_parameters(),
        "variables": {name: _attribute(model, name).detach().clone() for name in variables},
        "acting": [checkpoint.weights for checkpoint in checkpoints[saved:]],
    }
    state, arrays = global_random_state()
    state.update(
        num_timesteps=step,
        n_updates=model._n_updates,
        episode_num=model._episode_num,
        action_space=model.action_space.np_random.bit_generator.state,
        envs=[{"resets": env.resets, "steps": env.steps} for env in agent.envs],
        checkpoints=[{"timesteps": checkpoint.timesteps, "success": checkpoint.success} for checkpoint in checkpoints[saved:]],
    )
    arrays.update(last_obs=model._last_obs, last_episode_starts=model._last_episode_starts)
    segment: dict[str, np.ndarray] = {}
    buffer = getattr(model, "replay_buffer", None)
    if buffer is not None:
        slots = np.arange(start // n_envs, step // n_envs) % buffer.buffer_size
        segment.update({f"replay/{name}": getattr(buffer, name)[slots] for name in REPLAY_ARRAYS if getattr(buffer, name) is not None})
    for j, env in enumerate(agent.envs):
        recorded = [(ended, episode) for ended, episode in env.finished if ended > start // n_envs]
        if recorded:
            columns = episode_arrays([episode for _, episode in recorded], 0, agent.learner.action_dtype)
            columns["ended_at"] = np.array([ended for ended, _ in recorded], dtype=np.int64)
            segment.update({f"env{j}/{key}": values for key, values in columns.items()})
    with atomic_dir(folder / f"{step:010d}") as tmp:
        torch.save(tensors, tmp / "model.pt")
        np.savez(tmp / "state.npz", allow_pickle=False, **arrays)
        np.savez(tmp / "segment.npz", allow_pickle=False, **segment)
        (tmp / "state.json").write_text(json.dumps(state))


def restore_snapshots(agent: TaskAgent, folder: Path) -> list[Checkpoint]:
    """Put a fresh agent where the last snapshot in `folder` left its run (the replay buffer and recorded episodes
    rebuilt from every snapshot's segment) and return the run's checkpoints so far; none without a snapshot."""
    import torch

    found = sorted(path for path in folder.iterdir() if path.is_dir() and path.name.isdigit()) if folder.is_dir() else []
    if not found:
        return []
    model, n_envs = agent.model, agent.learner.n_envs
    buffer = getattr(model, "replay_buffer", None)
    checkpoints: list[Checkpoint] = []
    start, state, tensors = 0, {}, {}
    for snapshot in found:
        state = json.loads((snapshot / "state.json").read_text())
        tensors = torch.load(snapshot / "model.pt", weights_only=True)
        checkpoints += [Checkpoint(c["timesteps"], c["success"], weights) for c, weights in zip(state["checkpoints"], tensors["acting"])]
        step = state["num_timesteps"]
        with np.load(snapshot / "segment.npz", allow_pickle=False) as segment:
            if buffer is not None:
                slots = np.arange(start // n_envs, step // n_envs) % buffer.buffer_size
                for name in REPLAY_ARRAYS:
                    if f"replay/{name}" in segment.files:
                        getattr(buffer, name)[slots] = segment[f"replay/{name}"]
            for j, env in enumerate(agent.envs):
                prefix = f"env{j}/"
                columns = {key.removeprefix(prefix): segment[key] for key in segment.files if key.startswith(prefix)}
                env.finished += recorded_episodes(columns) if columns else []
        start = step
    if buffer is not None:
        buffer.pos, buffer.full = (start // n_envs) % buffer.buffer_size, start // n_envs >= buffer.buffer_size
    model.set_parameters(tensors["parameters"], exact_match=True, device="cpu")
    for name, value in tensors["variables"].items():
        _attribute(model, name).data.copy_(value)
    model.num_timesteps, model._n_updates, model._episode_num = start, state["n_updates"], state["episode_num"]
    for env, saved in zip(agent.envs, state["envs"]):
        env.resets, env.steps = saved["resets"] - 1, saved["steps"]  # the reset below starts the latest episode again
    with np.load(found[-1] / "state.npz", allow_pickle=False) as saved_arrays:
        arrays = {key: saved_arrays[key] for key in saved_arrays.files}
    observations = agent.vec_env.reset()  # flat arrays: the learners' environments have no dict observations
    if not (isinstance(observations, np.ndarray) and np.array_equal(observations, arrays["last_obs"])):
        raise OffbenchError(
            f"{found[-1]}: the training environments do not reset to the snapshot's observations; "
            f"delete {folder} to train {agent.name} from the start"
        )
    model._last_obs, model._last_episode_starts = arrays["last_obs"], arrays["last_episode_starts"]
    model.action_space.np_random.bit_generator.state = state["action_space"]
    set_global_random_state(state, arrays)
    return checkpoints


def _attribute(model, dotted: str) -> Any:
    """`model.a.b` for "a.b": where stable-baselines3 names the tensors it saves beside the state_dicts."""
    for name in dotted.split("."):
        model = getattr(model, name)
    return model


def recorded_episodes(columns: dict[str, np.ndarray]) -> list[tuple[int, dict[str, Any]]]:
    """`episode_arrays` columns with their `ended_at` back as the recorded episodes `TrainingEpisodes` keeps."""
    bounds = np.concatenate([[0], np.cumsum(columns["lengths"])])
    return [
        (
            int(columns["ended_at"][i]),
            {
                "seed": int(columns["episode_seed"][first]),
                "observations": [*columns["observations"][first:end], columns["final_observations"][i]],
                **{key: list(columns[column][first:end]) for key, column in RECORDED_COLUMNS.items()},
            },
        )
        for i, (first, end) in enumerate(zip(bounds[:-1], bounds[1:]))
    ]


RECORDED_COLUMNS = {  # a recorded episode's per-step lists and the `episode_arrays` column each becomes
    "actions": "actions",
    "rewards": "rewards",
    "terminations": "terminations",
    "truncations": "truncations",
    "step_success": "infos/success",
}


def task_run(recipe: LearnedRecipe, task_id: int, advance: Callable[..., None]) -> TaskRun:
    """The task's run from the cache, else trained and cached (written by one rename: a cache file is whole). Under
    the run's work lock: a process asking for a run another one is training waits for it, then reuses it."""
    params, path = recipe.params, run_path(recipe, task_id)
    with work_lock(path):
        if path.is_file():  # looked for only once the lock is held: the holder may have just written it
            advance(params.timesteps, success=f"{recipe.names[task_id]} trained before")
            return TaskRun.from_bytes(path.read_bytes())
        run = trained_run(recipe, task_id, advance)
        atomic_write_bytes(path, run.to_bytes())
        shutil.rmtree(snapshots_dir(recipe, task_id), ignore_errors=True)
    return run


def trained_run(recipe: LearnedRecipe, task_id: int, advance: Callable[..., None]) -> TaskRun:
    """The task's run, trained from scratch up to the recipe's stop."""
    params = recipe.params
    band = stops_at_band(params)
    agent = TaskAgent(recipe, task_id, record=band)
    try:
        checkpoints = train(agent, advance)
        ended = [(step, episode) for step, episode in agent.ended_episodes() if step <= checkpoints[-1].timesteps]
    finally:
        agent.close()
    advance(params.timesteps - checkpoints[-1].timesteps)  # the steps the stop spared
    may_act = range(1, len(checkpoints)) if band else [len(checkpoints) - 1]  # choose_checkpoint's candidates
    training = None
    if ended:
        training = {
            **episode_arrays([episode for _, episode in ended], 0, recipe.learner.action_dtype),
            "ended_at": np.array([step for step, _ in ended], dtype=np.int64),
        }
    return TaskRun(
        timesteps=np.array([c.timesteps for c in checkpoints], dtype=np.int64),
        success=np.array([c.success for c in checkpoints], dtype=np.float64),
        weights={index: checkpoints[index].weights for index in may_act},
        training=training,
    )


def learn_task(recipe: LearnedRecipe, task_id: int, advance: Callable[..., None]) -> dict[str, np.ndarray]:
    """The task's run (trained, or reused from the cache), its acting checkpoint, and the task's shard: its episodes
    and checkpoints."""
    params, name = recipe.params, recipe.names[task_id]
    run = task_run(recipe, task_id, advance)
    chosen = choose_checkpoint(run.success.tolist(), params.quality, params.target_success, first_trained(run.timesteps, recipe.learner))
    if params.quality == "replay":
        episodes = run.training_episodes(int(run.timesteps[chosen]), task_id)
        if episodes is None:
            raise OffbenchError(
                f"{name}: no training episode ended by the acting checkpoint, at {run.timesteps[chosen]} steps; "
                "raise the band or checkpoint_every"
            )
    else:
        agent = TaskAgent(recipe, task_id, record=False)
        try:
            lanes = agent.lanes(recipe.episodes_per_task)
            results = agent.play(lanes, record=True, weights=run.weights[chosen])
        finally:
            agent.close()
        recorded = [{**result, "seed": lane.seed} for result, lane in zip(results, lanes)]
        episodes = episode_arrays(recorded, task_id, recipe.learner.action_dtype)
    return {
        **episodes,
        "checkpoint_timesteps": run.timesteps,
        "checkpoint_success": run.success,
        "checkpoint_acting": np.array(chosen, dtype=np.int64),
    }


EPISODE_KEYS = (
    "observations",
    "final_observations",
    "actions",
    "rewards",
    "terminations",
    "truncations",
    "lengths",
    "task_id",
    "episode_seed",
    "behaviour",
    "infos/success",
)


def episode_arrays(episodes: list[dict[str, Any]], task_id: int, action_dtype: type) -> dict[str, np.ndarray]:
    """Recorded episodes (observations with T + 1 rows, actions, rewards, terminations, truncations, step_success,
    seed) as the flat arrays of a dataset, with the multi-task columns."""
    lengths = np.array([len(episode["actions"]) for episode in episodes], dtype=np.int64)
    return {
        "observations": np.concatenate([np.stack(episode["observations"][:-1]) for episode in episodes]),
        "final_observations": np.stack([episode["observations"][-1] for episode in episodes]),
        "actions": np.concatenate([np.asarray(episode["actions"], dtype=action_dtype) for episode in episodes]),
        "rewards": np.concatenate([np.asarray(episode["rewards"], dtype=np.float32) for episode in episodes]),
        "terminations": np.concatenate([np.asarray(episode["terminations"], dtype=bool) for episode in episodes]),
        "truncations": np.concatenate([np.asarray(episode["truncations"], dtype=bool) for episode in episodes]),
        "lengths": lengths,
        "task_id": np.full(lengths.sum(), task_id, dtype=np.int64),
        "episode_seed": np.repeat([episode["seed"] for episode in episodes], lengths).astype(np.int64),
        "behaviour": np.zeros(lengths.sum(), dtype=np.int8),  # one behaviour: behaviour_profiles is [quality]
        "infos/success": np.concatenate([np.asarray(episode["step_success"], dtype=bool) for episode in episodes]),
    }


def in_band(params: LearnedParams, success: float) -> dict[str, bool]:
    """medium, replay: whether the acting checkpoint's success lies in the band (the card says so per task)."""
    return {"in_band": params.band[0] <= success <= params.band[1]} if stops_at_band(params) else {}


def shard_path(work: Path, task_id: int) -> Path:
    return work / f"task{task_id:03d}.npz"


def merge(recipe: LearnedRecipe, work: Path):
    """One EpisodeStore from every task's shard, in task order, with the card's record of how it was made."""
    from offbench.data.store import EpisodeStore
    from offbench.envs.factory import make_env

    shards = []
    for task_id in range(len(recipe.names)):
        with np.load(shard_path(work, task_id), allow_pickle=False) as shard:
            shards.append({key: shard[key] for key in shard.files})
    arrays = {key: np.concatenate([shard[key] for shard in shards]) for key in EPISODE_KEYS}
    probe = make_env(recipe.env, 0)
    store = EpisodeStore.from_arrays(
        arrays, arrays.pop("lengths"), observation_space=probe.observation_space, action_space=probe.action_space
    )
    probe.close()
    params = recipe.params
    checkpoints = {
        name: {
            "timesteps": shard["checkpoint_timesteps"].tolist(),
            "success": shard["checkpoint_success"].tolist(),
            "acting": int(shard["checkpoint_acting"]),
            **in_band(params, float(shard["checkpoint_success"][shard["checkpoint_acting"]])),
        }
        for name, shard in zip(recipe.names, shards)
    }
    card = {
        "kind": "multi-task",
        "source": {"recipe": {"generator": recipe.generator, "seed": recipe.seed}},
        "env": recipe.env,
        "quality": params.quality,
        **({} if params.quality == "replay" else {"episodes_per_task": recipe.episodes_per_task}),
        "behaviour": recipe.behaviour(),
        "behaviour_profiles": [params.quality],
        "checkpoints": checkpoints,
        "task_stats": task_stats(store, recipe.names),
    }
    store.card = json.loads(json.dumps(card))
    return store


def generate_learned(recipe: LearnedRecipe, out: Path, quiet: bool) -> Path:
    """Train an agent per task (resuming at the tasks without a shard, those another process is training last) and
    write the recipe's data into `out`."""
    out = Path(out)
    work = out.parent / f"{out.name}.work"
    _claim_work_dir(work, recipe)
    todo = [task_id for task_id in range(len(recipe.names)) if not shard_path(work, task_id).is_file()]
    steps = recipe.params.timesteps
    with (
        progress_bar(
            quiet,
            f"{recipe.generator} {recipe.env['id']} {recipe.params.quality}",
            steps * len(recipe.names),
            unit=f"{recipe.learner.algorithm} steps",
            completed=steps * (len(recipe.names) - len(todo)),
            fields=("success",),
        ) as advance,
        one_torch_thread(),
    ):
        while todo:
            # a task another process is training (for another card of the same runs) is left till last, so two
            # processes on, say, the medium and the replay card of one suite train different tasks side by side
            task_id = next((t for t in todo if not held_elsewhere(run_path(recipe, t))), todo[0])
            todo.remove(task_id)
            atomic_write_bytes(shard_path(work, task_id), _npz_bytes(learn_task(recipe, task_id, advance)))
    merge(recipe, work).save(out)
    shutil.rmtree(work)
    return out
