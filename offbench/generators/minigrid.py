"""MiniGrid MT3 / MT5 / MT7 offline data from a shortest-path planner on the full grid state, with noise.

The planner is a breadth-first search over primitive actions (left, right, forward, pickup, toggle) on the
state (agent cell, direction, carried key, door states, keys on the floor), read from the environment's full
grid, so its plans are shortest in actions (MiniGrid's reward, 1 - 0.9 t / max_steps, is highest for them).
It knows each suite task's goal test: the goal square (DoorKey, DistShift, LavaGap, SimpleCrossing, MultiRoom),
the cell beside the object matching the start room's (Memory), opening the blue door after the red one
(RedBlueDoors); it never plans into lava or a failing end. Drops are never planned (no suite task needs one).

Behaviour (per step): with probability ε a uniformly random action among MiniGrid's 7, otherwise the plan's
next action; after a random action the planner replans from the new state.
  near-optimal   ε = 0.05
  noisy-planner  ε = 0.75 (no policy acts like this: the observation barely predicts the next action; for a
                 worse policy's own experience, the field's "sub-optimal", see generator minigrid-learned)
  mixed          one of the two, by a fair coin per episode (the `behaviour` column says which)
Measured on MT7 (seed 0, 60-100 episodes per task): ε = 0.5 still succeeds 93-100% (replanning recovers within
MiniGrid's long time limits), ε = 0.75 drops LavaGap to ~57%, MultiRoom to ~73%, DistShift to ~80% and every
task's mean return; ε = 0.9 is close to a random walk.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator, Sequence

import gymnasium as gym
import numpy as np

from offbench.envs.multitask import Lane
from offbench.errors import OffbenchError
from offbench.generators import register_generator
from offbench.generators.multitask import Collection, Recipe, check_recipe_params, collect, lane_behaviour, recipe_from_params

NOISE = {"near-optimal": {"epsilon": 0.05}, "noisy-planner": {"epsilon": 0.75}}  # the qualities besides mixed, in behaviour-column order
CHUNK_EPISODES = 100
NUM_ACTIONS = 7  # MiniGrid's Actions: left, right, forward, pickup, drop, toggle, done
LEFT, RIGHT, FORWARD, PICKUP, TOGGLE = 0, 1, 2, 3, 5
DIRECTIONS = ((1, 0), (0, 1), (-1, 0), (0, -1))  # minigrid.core.constants.DIR_TO_VEC
OPEN, CLOSED, LOCKED = 0, 1, 2  # minigrid's door state encoding


def shortest_plan(env: gym.Env) -> list[int]:
    """The shortest action sequence from the environment's current state to success ([] if none exists)."""
    world = _PlanningWorld(env.unwrapped)
    return breadth_first_plan(world.start, world.successors)


def breadth_first_plan(start: Hashable, successors: Callable[[Any], Iterator[tuple[int, Any]]]) -> list[int]:
    """Actions of a shortest path from `start` to success: `successors(state)` yields (action, next state),
    with None as the next state when that action succeeds. [] when success cannot be reached."""
    parents: dict[Any, tuple[Any, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        for action, nxt in successors(state):
            if nxt is None:
                plan = [action]
                while (parent := parents[state]) is not None:
                    state, previous_action = parent
                    plan.append(previous_action)
                return plan[::-1]
            if nxt not in parents:
                parents[nxt] = (state, action)
                queue.append(nxt)
    return []


class _PlanningWorld:
    """A MiniGrid layout as a search problem. A state is (x, y, direction, carried key index (-1 none, -2 a
    non-key object), each door's OPEN / CLOSED / LOCKED, whether each key is still on the floor); the
    walls, goal, lava and the rules of Memory and RedBlueDoors stay fixed during the search."""

    def __init__(self, world: Any):
        from minigrid.core.world_object import Door, Key
        from minigrid.envs.memory import MemoryEnv
        from minigrid.envs.redbluedoors import RedBlueDoorEnv

        self.world, self.grid = world, world.grid
        self.doors: list[tuple[tuple[int, int], Any]] = []
        self.keys: list[tuple[tuple[int, int] | None, Any]] = []
        for index, cell in enumerate(self.grid.grid):
            position = (index % self.grid.width, index // self.grid.width)
            if isinstance(cell, Door):
                self.doors.append((position, cell))
            elif isinstance(cell, Key):
                self.keys.append((position, cell))
        carrying = -1
        if isinstance(world.carrying, Key):
            self.keys.append((None, world.carrying))
            carrying = len(self.keys) - 1
        elif world.carrying is not None:
            carrying = -2  # something that is not a key: it opens nothing
        self.door_at = {position: i for i, (position, _) in enumerate(self.doors)}
        self.key_at = {position: i for i, (position, _) in enumerate(self.keys) if position is not None}
        self.memory = isinstance(world, MemoryEnv)
        self.red_blue = isinstance(world, RedBlueDoorEnv)
        if self.red_blue:
            self.red, self.blue = (
                next(i for i, (_, door) in enumerate(self.doors) if door is target) for target in (world.red_door, world.blue_door)
            )
        self.start = (
            int(world.agent_pos[0]),
            int(world.agent_pos[1]),
            int(world.agent_dir),
            carrying,
            tuple(OPEN if door.is_open else LOCKED if door.is_locked else CLOSED for _, door in self.doors),
            tuple(position is not None for position, _ in self.keys),
        )

    def successors(self, state):
        """(action, next state or None when that action succeeds) for every action that changes the state."""
        x, y, d, carry, door_states, on_floor = state
        yield LEFT, (x, y, (d - 1) % 4, carry, door_states, on_floor)
        yield RIGHT, (x, y, (d + 1) % 4, carry, door_states, on_floor)
        fx, fy = x + DIRECTIONS[d][0], y + DIRECTIONS[d][1]
        front = (fx, fy)
        if front in self.door_at:
            yield from self._at_door(state, self.door_at[front])
        elif front in self.key_at and on_floor[self.key_at[front]]:
            i = self.key_at[front]
            if carry == -1 and not self.memory:  # Memory turns pickup into toggle
                yield PICKUP, (x, y, d, i, door_states, on_floor[:i] + (False,) + on_floor[i + 1 :])
        else:
            yield from self._forward(state, front)

    def _at_door(self, state, i: int):
        """Facing door i: walk through it if open, toggle it (open, close, unlock with the carried key of
        its colour), under RedBlueDoors' rule that the blue door succeeds only after the red one."""
        x, y, d, carry, door_states, on_floor = state
        fx, fy = x + DIRECTIONS[d][0], y + DIRECTIONS[d][1]
        state_i = door_states[i]
        if state_i == OPEN:
            yield FORWARD, (fx, fy, d, carry, door_states, on_floor)
        opened = state_i == CLOSED or (state_i == LOCKED and carry >= 0 and self.keys[carry][1].color == self.doors[i][1].color)
        if state_i == OPEN or opened:
            new_states = door_states[:i] + ((CLOSED if state_i == OPEN else OPEN),) + door_states[i + 1 :]
            if self.red_blue and i == self.blue and new_states[i] == OPEN:
                if door_states[self.red] == OPEN:
                    yield TOGGLE, None
            elif not (self.red_blue and i == self.red and door_states[self.blue] == OPEN):
                yield TOGGLE, (x, y, d, carry, new_states, on_floor)

    def _forward(self, state, front: tuple[int, int]):
        """Stepping onto a free cell (or a picked-up key's former cell): the goal or Memory's matching object
        succeeds, lava and Memory's other object end the search on this branch."""
        x, y, d, carry, door_states, on_floor = state
        cell = self.grid.get(*front)
        if not (cell is None or cell.can_overlap() or (front in self.key_at and not on_floor[self.key_at[front]])):
            return
        if self.memory and front == tuple(self.world.success_pos):
            yield FORWARD, None
        elif self.memory and front == tuple(self.world.failure_pos):
            return
        elif cell is not None and cell.type == "goal":
            yield FORWARD, None
        elif cell is None or cell.type != "lava":
            yield FORWARD, (front[0], front[1], d, carry, door_states, on_floor)


class NoisyPlanner:
    """Follows each lane's shortest plan, taking a random action with the lane's probability ε (a batch `Policy`)."""

    def __init__(self, lanes: Sequence[Lane], envs: Sequence[gym.Env], recipe: Recipe):
        self.envs = envs
        self.epsilon = []
        self.rngs = []
        for lane in lanes:
            profile, rng = lane_behaviour(lane, recipe.quality, recipe.profiles)
            self.epsilon.append(recipe.behaviour[recipe.profiles[profile]]["epsilon"])
            self.rngs.append(rng)
        self.plans: list[list[int]] = [[] for _ in lanes]

    def reset(self, num_envs: int) -> None:
        self.plans = [[] for _ in range(num_envs)]

    def act(self, observations: np.ndarray) -> np.ndarray:
        actions = np.empty(len(observations), dtype=np.int64)
        for i, (env, epsilon, rng) in enumerate(zip(self.envs, self.epsilon, self.rngs)):
            if rng.random() < epsilon:
                actions[i] = rng.integers(NUM_ACTIONS)
                self.plans[i] = []  # the world may have changed: replan next time
                continue
            if not self.plans[i]:
                self.plans[i] = shortest_plan(env)[::-1]
            actions[i] = self.plans[i].pop() if self.plans[i] else rng.integers(NUM_ACTIONS)
        return actions

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        pass


def minigrid_recipe(params: dict[str, Any], seed: int) -> Recipe:
    """The recipe a card's params describe: suite, tasks (default: the suite's), quality, episodes, observation."""
    from offbench.envs.minigrid import suite_tasks

    check_recipe_params("minigrid", params, ("observation",))
    suite = str(params.get("suite", "MT7"))
    tasks = list(params.get("tasks") or suite_tasks(suite))
    outside = sorted(set(tasks) - set(suite_tasks("MT7")))
    if outside:
        known = ", ".join(suite_tasks("MT7"))
        raise OffbenchError(f"task(s) {', '.join(outside)} are not MiniGrid suite tasks (the planner knows {known})")
    env = {"suite": "minigrid", "id": suite, "kwargs": {"tasks": tasks, "observation": str(params.get("observation", "flat"))}}
    return recipe_from_params("minigrid", params, seed, env, NOISE)


@register_generator("minigrid")
def generate_minigrid(params: dict[str, Any], seed: int, out: Path, quiet: bool = False) -> Path:
    """Collect a MiniGrid multi-task dataset (layouts drawn from per-episode reset seeds) into `out`."""
    from offbench.envs.factory import make_env

    recipe = minigrid_recipe(params, seed)
    probe = make_env(recipe.env, 0)  # every suite task shares the 7x7 view and the 7 actions
    collection = Collection(
        recipe=recipe,
        behaviour=NoisyPlanner,
        observation_space=probe.observation_space,
        action_space=probe.action_space,
        chunk_episodes=CHUNK_EPISODES,
        workers=int(params.get("workers", 0)),
    )
    probe.close()
    return collect(collection, out, quiet=quiet)
