"""MiniGrid multi-task suites (MT3, MT5, MT7 as MOORE used them), rebuilt from a card.

Task lists: MOORE (Hendawy et al., ICLR 2024), `run_minigrid_ppo_mt.py`, dict `MT_EXP`, in the authors'
repository AhmedMagdyHendawy/MOORE at commit 9c8d62a. MOORE observes the 7x7x3 egocentric image only
(minigrid's `ImgObsWrapper`) with each environment's own `max_steps` as horizon. We keep the horizon; our default
observation ("flat") adds the agent's direction to the image, and `observation = "image"` is MOORE's image alone.

A card's [env] table for this suite:

    [env]
    suite = "minigrid"
    id = "MT7"
    kwargs = { tasks = ["MiniGrid-DoorKey-6x6-v0", ...], observation = "flat" }

Observations: "flat" (default) is the egocentric view image flattened (147 uint8) followed by the agent's
direction (0-3), a (148,) uint8 vector; "image" is the (7, 7, 3) uint8 image alone, exactly `ImgObsWrapper`'s.
The layout (goal, doors, key, lava) is drawn from the reset seed, so `reset(seed=s)` rebuilds an episode's
world. Episodes terminate at the goal, in lava or at a wrong door/object, and are truncated at `max_steps`.
`info["success"]` is true on the step that ends an episode with a positive reward (MiniGrid pays reward
only on success).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from offbench.envs.factory import register_suite
from offbench.errors import OffbenchError, require

SUITES: dict[str, list[str]] = {
    "MT3": ["MiniGrid-LavaGapS7-v0", "MiniGrid-RedBlueDoors-6x6-v0", "MiniGrid-MemoryS11-v0"],
    "MT5": [
        "MiniGrid-DoorKey-6x6-v0",
        "MiniGrid-LavaGapS7-v0",
        "MiniGrid-RedBlueDoors-6x6-v0",
        "MiniGrid-DistShift1-v0",
        "MiniGrid-MemoryS11-v0",
    ],
    "MT7": [
        "MiniGrid-DoorKey-6x6-v0",
        "MiniGrid-DistShift1-v0",
        "MiniGrid-RedBlueDoors-6x6-v0",
        "MiniGrid-LavaGapS7-v0",
        "MiniGrid-MemoryS11-v0",
        "MiniGrid-SimpleCrossingS9N2-v0",
        "MiniGrid-MultiRoom-N2-S4-v0",
    ],
}
OBSERVATIONS = ("flat", "image")


def suite_tasks(suite: str) -> list[str]:
    if suite not in SUITES:
        raise OffbenchError(f"unknown MiniGrid suite '{suite}' (known: {', '.join(SUITES)})")
    return list(SUITES[suite])


class EgocentricObservation(gym.ObservationWrapper):
    """The agent's partial view as one array: flattened image + direction, or the image alone."""

    def __init__(self, env: gym.Env, observation: str = "flat"):
        super().__init__(env)
        if observation not in OBSERVATIONS:
            raise OffbenchError(f"unknown MiniGrid observation '{observation}' (known: {', '.join(OBSERVATIONS)})")
        self.flat = observation == "flat"
        image = env.observation_space.spaces.get("image") if isinstance(env.observation_space, gym.spaces.Dict) else None
        if not isinstance(image, gym.spaces.Box):
            raise OffbenchError(f"{env.spec.id if env.spec else env}: not a MiniGrid environment (its observations have no image)")
        if self.flat:  # (one bound for all: the direction's 0..3 fits, and the space prints in one line)
            self.observation_space = gym.spaces.Box(0, 255, (int(np.prod(image.shape)) + 1,), np.uint8)
        else:
            self.observation_space = image

    def observation(self, obs: dict[str, Any]) -> np.ndarray:
        image = np.asarray(obs["image"], dtype=np.uint8)
        if not self.flat:
            return image
        return np.concatenate([image.reshape(-1), np.array([obs["direction"]], dtype=np.uint8)])


class SuccessInfo(gym.Wrapper):
    """Adds `info["success"]`: the episode ended with a positive reward (goal reached, right door, right object)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "success": bool(terminated and float(reward) > 0)}


@register_suite("minigrid")
def make_minigrid_env(
    env_id: str,
    task: int | str | None = None,
    tasks: list[str] | None = None,
    observation: str = "flat",
) -> gym.Env:
    """The environment of one task of a MiniGrid suite, with the egocentric observation and `info["success"]`."""
    from offbench.envs.multitask import task_by_id

    require("minigrid", "minigrid")
    names = list(tasks) if tasks is not None else suite_tasks(env_id)
    name = task_by_id(names, task, f"MiniGrid {env_id}")
    try:
        env = gym.make(name, disable_env_checker=True)
    except gym.error.Error as exc:
        raise OffbenchError(f"cannot make MiniGrid environment '{name}': {exc}") from None
    return SuccessInfo(EgocentricObservation(env, observation))
