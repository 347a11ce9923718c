"""`mujoco-local`: D4RL-style locomotion datasets (medium, medium-replay, expert, medium-expert) made here,
for machines that cannot download D4RL's files.

D4RL's recipe (Fu et al. 2020, section 5, and the d4rl repository's scripts/generation/mujoco), on Gymnasium's
v4 MuJoCo models that the D4RL cards evaluate on:
  medium         `transitions` steps of a Soft Actor-Critic policy stopped early, at about a third of the expert's return
  medium-replay  the agent's experience (its replay buffer) from the start of training up to that policy
  expert         `transitions` steps of the run's best policy (D4RL's: the end of a 1M-step run; see `choose_expert`)
  medium-expert  the medium steps, then the expert steps (each the same steps as in its own dataset)
Policies act by sampling from their squashed Gaussian, as D4RL's collect_data.py does. A step is terminated where the
environment terminated it (the agent fell) and truncated where the time limit cut the episode, never both (a fall on
the last allowed step is a termination: nothing follows it to bootstrap from); the one other truncation is the last
step of a part, where its budget (or, for medium-replay, the checkpoint) cuts an episode short, as D4RL's files do.

Training (stable-baselines3's SAC) runs once per (environment, seed, training settings) in a workspace under
$OFFBENCH_HOME/work/mujoco-local/ that the four levels share. Every `checkpoint_every` steps it writes a checkpoint
folder atomically: the model with its optimisers, the random states, the MuJoCo state of the episode under way, the
segment's experience, and the policy's return over fixed evaluation seeds. Each training segment, also in a run that
is never stopped, starts by loading the previous checkpoint, so a killed run resumes from its last checkpoint with the
same bytes as a run that was not killed. What follows training (the reference returns, then the dataset's rollouts)
restarts from its beginning; the reference returns are kept once measured. Training and measuring the references
happen under the workspace's lock (`work_lock`): a second process making a level of the same run waits for the first
to finish them, then reuses them; the rollouts, which only read the workspace, run side by side.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, cast

import gymnasium as gym
import numpy as np

from offbench import records
from offbench.data.store import EpisodeStore
from offbench.errors import require
from offbench.generators import register_generator
from offbench.generators.gym_episodes import rollout
from offbench.generators.random_state import global_random_state, set_global_random_state
from offbench.generators.sb3_logging import without_log_folders
from offbench.generators.torch_threads import one_torch_thread
from offbench.generators.work_lock import work_lock
from offbench.paths import work_dir
from offbench.records import Invalid, ranged
from offbench.utils import atomic_dir, atomic_write_json, progress_bar

if TYPE_CHECKING:  # gymnasium's MuJoCo module imports mujoco, which only this generator's runs need
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

ENV_IDS = ("Hopper-v4", "HalfCheetah-v4", "Walker2d-v4")
LEVELS = ("medium", "medium-replay", "medium-expert", "expert")
EVALUATION_SEED = 1_000_000  # checkpoints: episode i resets with seed EVALUATION_SEED + i, actions drawn from torch seed EVALUATION_SEED
REFERENCE_SEED = 2_000_000  # reference returns: the same, from this base
PART_SEEDS = {"medium": 1, "expert": 2}  # the rollouts of each policy draw from SeedSequence([seed, PART_SEEDS[part]])
TRAINING_FIELDS = (
    "env_id",
    "max_episode_steps",
    "train_steps",
    "checkpoint_every",
    "learning_starts",
    "batch_size",
    "buffer_size",
    "learning_rate",
    "gamma",
    "tau",
    "net_arch",
    "evaluation_episodes",
)
BUFFER_ARRAYS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


@dataclass(frozen=True)
class MujocoLocalRecipe:
    """A card's `source.recipe.params`: the SAC run (shared by the four levels of one environment and seed) and the dataset."""

    env_id: str = ranged(choices=ENV_IDS, doc="Gymnasium MuJoCo environment, the v4 model D4RL's cards evaluate on.")
    level: str = ranged(choices=LEVELS, doc="Which D4RL dataset to make from the run.")
    train_steps: int = ranged(
        ge=1, doc="SAC environment steps (one gradient step each after `learning_starts`); the best checkpoint is the expert."
    )
    checkpoint_every: int = ranged(ge=1, doc="Steps between checkpoints: the resume points and the candidates for the medium policy.")
    transitions: int = ranged(1_000_000, ge=1, doc="Steps rolled out per policy (medium, expert; medium-expert has twice as many).")
    max_episode_steps: int = ranged(1000, ge=1, doc="The time limit (D4RL's: 1000).")
    learning_starts: int = ranged(10_000, ge=0, doc="Uniformly random actions before learning (rl-baselines3-zoo's MuJoCo SAC setting).")
    batch_size: int = ranged(256, ge=1)
    buffer_size: int = ranged(1_000_000, ge=1, doc="Replay buffer capacity; at least `checkpoint_every`.")
    learning_rate: float = ranged(3e-4, gt=0)
    gamma: float = ranged(0.99, gt=0, le=1)
    tau: float = ranged(0.005, gt=0, le=1)
    net_arch: list[int] = ranged(default_factory=lambda: [256, 256], ge=1, doc="Hidden layers of the actor and of each critic.")
    evaluation_episodes: int = ranged(10, ge=1, doc="Episodes each checkpoint is evaluated on (fixed seeds), to pick the medium one.")
    reference_episodes: int = ranged(100, ge=1, doc="Episodes of the random policy and of the expert for the card's reference returns.")
    medium_fraction: float = ranged(1 / 3, gt=0, lt=1, doc="The medium policy's return as a fraction of the expert's.")

    def check(self) -> None:
        if self.checkpoint_every > self.buffer_size:
            raise Invalid(
                f"'checkpoint_every' ({self.checkpoint_every}) must not exceed buffer_size ({self.buffer_size}): "
                "each checkpoint keeps its segment's experience from the replay buffer"
            )

    def training(self) -> dict[str, Any]:
        """The settings the SAC run depends on (the workspace's key): not the level, nor what is rolled out after."""
        return {name: getattr(self, name) for name in TRAINING_FIELDS}


@dataclass(frozen=True)
class Checkpoint:
    step: int
    returns: list[float]
    folder: Path

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))


def workspace_dir(recipe: MujocoLocalRecipe, seed: int) -> Path:
    """Where the run of these training settings and seed lives: $OFFBENCH_HOME/work/mujoco-local/<env>-s<seed>-<hash>."""
    key = hashlib.sha256(json.dumps({**recipe.training(), "seed": seed}, sort_keys=True).encode()).hexdigest()[:12]
    return work_dir("mujoco-local") / f"{recipe.env_id}-s{seed}-{key}"


@register_generator("mujoco-local")
def generate(params: dict[str, Any], seed: int, out: Path, quiet: bool) -> Path:
    recipe = records.from_dict(MujocoLocalRecipe, params, "mujoco-local recipe params")
    return make_dataset(recipe, seed, out, quiet)


def make_dataset(recipe: MujocoLocalRecipe, seed: int, out: Path, quiet: bool, workspace: Path | None = None) -> Path:
    """Train (or resume) the SAC run, measure the reference returns, roll out the level's data and write it to `out`."""
    require("stable_baselines3", "learned")
    require("mujoco", "mujoco")
    workspace = workspace or workspace_dir(recipe, seed)
    with one_torch_thread():
        with work_lock(workspace):  # one writer per workspace: another level's generation waits, then reuses the run
            checkpoints = train(recipe, seed, workspace, quiet)
            expert = choose_expert(checkpoints)
            references = reference_returns(recipe, expert, workspace, quiet)
        medium = choose_medium(checkpoints, expert, recipe.medium_fraction)
        data = level_episodes(recipe, seed, checkpoints, medium, expert, quiet)
    env = make_env(recipe)  # for its spaces
    env.close()
    store = EpisodeStore.from_episodes(
        data,
        observation_space=env.observation_space,
        action_space=env.action_space,
        card={
            "generator": "mujoco-local",
            "seed": seed,
            "params": records.to_dict(recipe),
            "scores": {"ref_min": references["random"], "ref_max": references["expert"], "measured": references["measured"]},
            "mujoco_local": {
                "checkpoints": [{"step": c.step, "mean_return": c.mean_return} for c in checkpoints],
                "medium_step": medium.step,
                "medium_return": medium.mean_return,
                "expert_step": expert.step,
                "expert_return": expert.mean_return,
            },
        },
    )
    return store.save(out)


def make_env(recipe: MujocoLocalRecipe) -> gym.Env:
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is out of date", category=DeprecationWarning)  # v4 on purpose: D4RL's model
        return gym.make(recipe.env_id, max_episode_steps=recipe.max_episode_steps)


# ---------------------------------------------------------------------------------------------- training


def train(recipe: MujocoLocalRecipe, seed: int, workspace: Path, quiet: bool) -> list[Checkpoint]:
    """Every checkpoint of the run, training from the last one written (or from scratch) up to `train_steps`."""
    checkpoints = finished_checkpoints(workspace)
    step = checkpoints[-1].step if checkpoints else 0
    if step >= recipe.train_steps:
        return checkpoints
    atomic_write_json(workspace / "training.json", {**recipe.training(), "seed": seed})
    model = without_log_folders(restore(recipe, checkpoints) if checkpoints else new_model(recipe, seed))
    with progress_bar(quiet, f"SAC {recipe.env_id}", recipe.train_steps, unit="steps", completed=step, fields=("evaluated",)) as advance:
        while step < recipe.train_steps:
            segment = min(recipe.checkpoint_every, recipe.train_steps - step)
            model.learn(segment, reset_num_timesteps=step == 0, callback=_progress_callback(advance))
            checkpoints.append(write_checkpoint(model, recipe, workspace, start=step))
            step = checkpoints[-1].step
            advance(0, evaluated=f"step {step:,}: return {checkpoints[-1].mean_return:.1f}")
            model = without_log_folders(restore(recipe, checkpoints, buffer=model.replay_buffer))  # as a resumed run would continue
    return checkpoints


def new_model(recipe: MujocoLocalRecipe, seed: int):
    from stable_baselines3 import SAC
    from stable_baselines3.common.vec_env import DummyVecEnv

    return SAC(
        "MlpPolicy",
        DummyVecEnv([lambda: make_env(recipe)]),
        learning_rate=recipe.learning_rate,
        buffer_size=recipe.buffer_size,
        learning_starts=recipe.learning_starts,
        batch_size=recipe.batch_size,
        tau=recipe.tau,
        gamma=recipe.gamma,
        policy_kwargs={"net_arch": list(recipe.net_arch)},
        seed=seed,
        device="cpu",
        verbose=0,
    )


def _progress_callback(advance: Callable[..., None]):
    from stable_baselines3.common.callbacks import BaseCallback

    class Progress(BaseCallback):
        def _on_step(self) -> bool:
            advance(1)
            return True

    return Progress()


def checkpoint_folder(workspace: Path, step: int) -> Path:
    return workspace / "checkpoints" / f"{step:010d}"


def finished_checkpoints(workspace: Path) -> list[Checkpoint]:
    """The checkpoints written so far, in order (each folder is complete: it appears by one rename)."""
    folder = workspace / "checkpoints"
    found = sorted(p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()) if folder.is_dir() else []
    return [Checkpoint(int(p.name), json.loads((p / "evaluation.json").read_text())["returns"], p) for p in found]


def write_checkpoint(model, recipe: MujocoLocalRecipe, workspace: Path, start: int) -> Checkpoint:
    """Save what resuming needs and the experience of steps [start, model.num_timesteps), evaluate the policy."""
    step = model.num_timesteps
    with atomic_dir(checkpoint_folder(workspace, step)) as tmp:
        model.save(tmp / "model.zip")
        buffer = model.replay_buffer
        slots = np.arange(start, step) % buffer.buffer_size
        np.savez(tmp / "experience.npz", allow_pickle=False, **{name: getattr(buffer, name)[slots, 0] for name in BUFFER_ARRAYS})
        state, arrays = training_state(model)
        np.savez(tmp / "state.npz", allow_pickle=False, **arrays)
        (tmp / "state.json").write_text(json.dumps(state))
        returns = evaluate(model.actor, recipe, recipe.evaluation_episodes, EVALUATION_SEED)
        (tmp / "evaluation.json").write_text(json.dumps({"step": step, "returns": returns}))
    return Checkpoint(step, returns, checkpoint_folder(workspace, step))


def _env_parts(venv) -> tuple[gym.Env, gym.wrappers.TimeLimit, MujocoEnv]:
    """The training environment (sb3's one-env DummyVecEnv), its TimeLimit wrapper and the MuJoCo simulation inside,
    whose state a checkpoint saves."""
    env = venv.envs[0]
    wrapper = env
    while not isinstance(wrapper, gym.wrappers.TimeLimit):
        wrapper = wrapper.env
    return env, wrapper, cast("MujocoEnv", env.unwrapped)  # a recipe's env_id is one of ENV_IDS, all MuJoCo environments


def training_state(model) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """What continuing the run needs beyond the model file: the random states (Python, NumPy's global, torch's, the
    action space's for the first random actions, the environment's for its resets) and the episode under way (its
    MuJoCo integration state, step count and observation)."""
    import mujoco

    _, time_limit, unwrapped = _env_parts(model.env)
    # the ignores: mujoco's functions and enums come from compiled modules without type stubs
    mj_state = np.empty(mujoco.mj_stateSize(unwrapped.model, mujoco.mjtState.mjSTATE_INTEGRATION))  # pyright: ignore[reportAttributeAccessIssue]
    mujoco.mj_getState(unwrapped.model, unwrapped.data, mj_state, mujoco.mjtState.mjSTATE_INTEGRATION)  # pyright: ignore[reportAttributeAccessIssue]
    state, arrays = global_random_state()
    state.update(
        action_space=model.action_space.np_random.bit_generator.state,
        env=unwrapped.np_random.bit_generator.state,
        elapsed_steps=cast(int, time_limit._elapsed_steps),  # sb3 reset the env before training: an episode is under way
    )
    arrays.update(mujoco=mj_state, last_obs=model._last_obs, last_episode_starts=model._last_episode_starts)
    return state, arrays


def restore(recipe: MujocoLocalRecipe, checkpoints: list[Checkpoint], buffer=None):
    """The model as the last checkpoint left it, its environment mid-episode where it was. `buffer`: the replay buffer
    of the run that wrote it (same content); otherwise rebuilt from every checkpoint's experience."""
    import mujoco
    from stable_baselines3 import SAC
    from stable_baselines3.common.vec_env import DummyVecEnv

    folder = checkpoints[-1].folder
    venv = DummyVecEnv([lambda: make_env(recipe)])
    model = SAC.load(folder / "model.zip", env=venv, device="cpu")
    model.replay_buffer = buffer if buffer is not None else rebuilt_buffer(model.replay_buffer, checkpoints)
    state = json.loads((folder / "state.json").read_text())
    with np.load(folder / "state.npz") as saved:
        arrays = {name: saved[name] for name in saved.files}

    env, time_limit, unwrapped = _env_parts(venv)
    env.reset(seed=0)  # the wrappers want a reset before a step; everything it set is overwritten below
    # the ignores: mujoco's functions and enums come from compiled modules without type stubs
    mujoco.mj_setState(unwrapped.model, unwrapped.data, arrays["mujoco"], mujoco.mjtState.mjSTATE_INTEGRATION)  # pyright: ignore[reportAttributeAccessIssue]
    time_limit._elapsed_steps = state["elapsed_steps"]
    unwrapped.np_random.bit_generator.state = state["env"]
    venv._reset_seeds()  # loading seeded the next reset; the run goes on with the environment's own stream
    model._last_obs, model._last_episode_starts = arrays["last_obs"], arrays["last_episode_starts"]

    set_global_random_state(state, arrays)
    model.action_space.np_random.bit_generator.state = state["action_space"]
    return model


def rebuilt_buffer(buffer, checkpoints: list[Checkpoint]):
    """The replay buffer after the last checkpoint, from the experience each checkpoint kept (in the slots sb3 filled)."""
    start = 0
    for checkpoint in checkpoints:
        slots = np.arange(start, checkpoint.step) % buffer.buffer_size
        with np.load(checkpoint.folder / "experience.npz") as experience:
            for name in BUFFER_ARRAYS:
                getattr(buffer, name)[slots, 0] = experience[name]
        start = checkpoint.step
    buffer.pos, buffer.full = start % buffer.buffer_size, start >= buffer.buffer_size
    return buffer


def choose_expert(checkpoints: list[Checkpoint]) -> Checkpoint:
    """The run's best policy: the checkpoint with the highest evaluation return (the earliest on a tie). D4RL's expert
    ends a 1M-step run; a shorter SAC run can end in one of SAC's dips on Hopper (a 300k-step run here returned 2,909
    at 180k steps and 817 at 200k), and the last checkpoint would then make a weak expert and a weaker medium."""
    return max(checkpoints, key=lambda c: c.mean_return)


def choose_medium(checkpoints: list[Checkpoint], expert: Checkpoint, fraction: float) -> Checkpoint:
    """The policy stopped early: of the checkpoints before the expert up to the first whose return reaches `fraction`
    of the expert's, the one closest to that return (the earliest on a tie)."""
    target = fraction * expert.mean_return
    candidates = checkpoints[: checkpoints.index(expert)] or [expert]
    reached = [i for i, c in enumerate(candidates) if c.mean_return >= target]
    candidates = candidates[: reached[0] + 1] if reached else candidates
    return min(candidates, key=lambda c: abs(c.mean_return - target))


# ---------------------------------------------------------------------------------------------- rollouts


def load_actor(checkpoint: Checkpoint):
    from stable_baselines3 import SAC

    return SAC.load(checkpoint.folder / "model.zip", device="cpu").actor


def sampled_actions(actor, torch_seed: int, draws: int = 1) -> Callable[[np.ndarray], np.ndarray]:
    """The policy's actions drawn from its squashed Gaussian with a torch generator of its own (`torch_seed`).

    With `draws` > 1 each action is the mean of that many draws, an estimate of the expected action
    E[tanh(mean + std * noise)]: what a behaviour cloner trained with MSE on the sampled actions converges to."""
    import torch

    generator = torch.Generator().manual_seed(torch_seed)

    def act(observation: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            mean, log_std, _ = actor.get_action_dist_params(torch.as_tensor(observation, dtype=torch.float32)[None])
            noise = torch.randn((draws, mean.shape[-1]), generator=generator)
            return torch.tanh(mean + log_std.exp() * noise).mean(0).numpy()

    return act


def episodes(env: gym.Env, act: Callable[[np.ndarray], np.ndarray], reset_seeds: Iterator[int]) -> Iterator[dict[str, np.ndarray]]:
    """Whole episodes, one per reset seed (`gym_episodes.rollout`'s layout)."""
    return (rollout(env, act, reset_seed) for reset_seed in reset_seeds)


def episode_return(episode: dict[str, np.ndarray]) -> float:
    return float(np.sum(episode["rewards"], dtype=np.float64))


def evaluate(actor, recipe: MujocoLocalRecipe, num_episodes: int, seed_base: int) -> list[float]:
    """Returns of the sampled policy on reset seeds seed_base + i, its actions drawn from torch seed seed_base."""
    env = make_env(recipe)
    return [episode_return(e) for e in episodes(env, sampled_actions(actor, seed_base), iter(range(seed_base, seed_base + num_episodes)))]


def reference_returns(recipe: MujocoLocalRecipe, expert: Checkpoint, workspace: Path, quiet: bool) -> dict[str, Any]:
    """The card's ref_min and ref_max: mean returns of uniformly random actions and of the expert over
    `reference_episodes` episodes; measured once per run (references.json in the workspace)."""
    path = workspace / f"references-{recipe.reference_episodes}.json"
    if path.is_file():
        return json.loads(path.read_text())
    n, env = recipe.reference_episodes, make_env(recipe)
    env.action_space.seed(REFERENCE_SEED)
    seeds = range(REFERENCE_SEED, REFERENCE_SEED + n)
    with progress_bar(quiet, "reference returns", 2 * n) as advance:
        random_returns = [episode_return(e) for e in _counted(episodes(env, lambda _: env.action_space.sample(), iter(seeds)), advance)]
        expert_returns = [
            episode_return(e) for e in _counted(episodes(env, sampled_actions(load_actor(expert), REFERENCE_SEED), iter(seeds)), advance)
        ]
    references = {
        "random": float(np.mean(random_returns)),
        "expert": float(np.mean(expert_returns)),
        "measured": f"offbench/generators/mujoco_local.py: mean return over {n} episodes of {recipe.env_id} (time limit "
        f"{recipe.max_episode_steps}), reset seeds {REFERENCE_SEED}..{REFERENCE_SEED + n - 1}; ref_min = uniformly random "
        f"actions (action space seeded {REFERENCE_SEED}), ref_max = the expert (SAC at step {expert.step:,}, actions "
        f"sampled from its policy, torch seed {REFERENCE_SEED})",
    }
    atomic_write_json(path, references)
    return references


def _counted(items: Iterator[Any], advance: Callable[..., None]) -> Iterator[Any]:
    for item in items:
        advance(1)
        yield item


def policy_part(recipe: MujocoLocalRecipe, seed: int, checkpoint: Checkpoint, part: str, quiet: bool) -> list[dict[str, np.ndarray]]:
    """`transitions` steps of the checkpoint's sampled policy, whole episodes but the last, cut where the budget ends."""
    streams = np.random.SeedSequence([seed, PART_SEEDS[part]]).generate_state(2)
    reset_rng = np.random.default_rng(int(streams[0]))
    reset_seeds = iter(lambda: int(reset_rng.integers(2**31)), None)
    rollouts = episodes(make_env(recipe), sampled_actions(load_actor(checkpoint), int(streams[1])), reset_seeds)
    collected, total = [], 0
    with progress_bar(quiet, f"{part} rollouts", recipe.transitions, unit="steps") as advance:
        while total < recipe.transitions:
            collected.append(cut(next(rollouts), recipe.transitions - total))
            total += len(collected[-1]["actions"])
            advance(len(collected[-1]["actions"]))
    return collected


def cut(episode: dict[str, np.ndarray], steps: int) -> dict[str, np.ndarray]:
    """The episode's first `steps` steps (all if it is shorter), its last step truncated where it was cut."""
    if steps >= len(episode["actions"]):
        return episode
    kept = {name: values[: steps + 1] if name == "observations" else values[:steps] for name, values in episode.items()}
    kept["terminations"] = np.zeros(steps, dtype=bool)
    kept["truncations"] = np.arange(steps) == steps - 1
    return kept


def replay_episodes(checkpoints: list[Checkpoint], until: Checkpoint) -> list[dict[str, np.ndarray]]:
    """The agent's experience from its first step up to the checkpoint `until`, cut into episodes at sb3's episode ends
    (its `dones`; `timeouts` where the time limit ended one); the episode under way at the checkpoint ends truncated."""
    parts = []
    for checkpoint in checkpoints[: checkpoints.index(until) + 1]:
        with np.load(checkpoint.folder / "experience.npz") as experience:
            parts.append({name: experience[name] for name in BUFFER_ARRAYS})
    steps = {name: np.concatenate([part[name] for part in parts]) for name in BUFFER_ARRAYS}
    ends = steps["dones"].astype(bool)
    ends[-1] = True
    timeouts = steps["timeouts"].astype(bool)
    bounds = np.concatenate([[0], np.flatnonzero(ends) + 1])
    replay = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        terminated = steps["dones"][lo:hi].astype(bool) & ~timeouts[lo:hi]
        replay.append(
            {
                "observations": np.concatenate([steps["observations"][lo:hi], steps["next_observations"][hi - 1 : hi]]).astype(np.float32),
                "actions": steps["actions"][lo:hi].astype(np.float32),
                "rewards": steps["rewards"][lo:hi].astype(np.float32),
                "terminations": terminated,
                "truncations": ends[lo:hi] & ~terminated,
            }
        )
    return replay


def level_episodes(
    recipe: MujocoLocalRecipe, seed: int, checkpoints: list[Checkpoint], medium: Checkpoint, expert: Checkpoint, quiet: bool
) -> list[dict[str, np.ndarray]]:
    """The episodes of the recipe's level (see the module docstring)."""
    if recipe.level == "medium-replay":
        return replay_episodes(checkpoints, medium)
    parts = {"medium": ["medium"], "expert": ["expert"], "medium-expert": ["medium", "expert"]}[recipe.level]
    policies = {"medium": medium, "expert": expert}
    return [episode for part in parts for episode in policy_part(recipe, seed, policies[part], part, quiet)]
