"""Source algorithms whose learning histories in-context RL distils, each run on N tasks at once.

Every algorithm keeps one independent learner per row of a batched environment (one row = one learning
history) and is written with whole-array operations, so a step of all histories costs a few NumPy calls.
States are flat: row * num_states + the row's tabular state, so one index reaches a row's table entry.

    act(states, steps) -> actions               steps: nominal step of each row in its history,
                                                episode * horizon + step in the episode
    update(state_actions, rewards, next_states, terminated)
                                                state_actions: flat state * actions + action; terminated
                                                is None when the environment never terminates

The nominal step counts an episode that ended early (termination) as if it had run to the horizon, so
episode e always starts at step e * horizon (AD-epsilon's schedule in corl-team/ad-eps does the same).
A row that has finished its history keeps stepping (unlogged) until the others have: its nominal steps
run past the schedule, whose last value then applies.

Randomness comes from `RowStreams`: the rows are cut into fixed streams of histories, each with its own
generator, and every draw is made stream by stream. A history's numbers therefore depend on its stream
alone, not on which other streams a worker runs beside it: the data is the same whatever the number of
workers. Hyper-parameters are the `Config` dataclass of each class; recipes may override them by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np


class SourceAlgorithm(Protocol):
    def act(self, states: np.ndarray, steps: np.ndarray) -> np.ndarray: ...

    def update(self, state_actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray, terminated: np.ndarray | None) -> None: ...


class RowStreams:
    """The random streams of a group of rows: stream k owns the next sizes[k] rows and generators[k]."""

    BLOCK_STEPS = 256  # per-step draws are made this many steps at a time (fewer calls, same numbers)

    def __init__(self, generators: list[np.random.Generator], sizes: list[int]):
        self.generators, self.sizes = generators, sizes
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        self.slices = [slice(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]

    def each(self, draw: Callable[[np.random.Generator, slice], np.ndarray]) -> np.ndarray:
        """draw(generator, rows) for every stream, joined along the first axis (rows)."""
        return np.concatenate([draw(g, rows) for g, rows in zip(self.generators, self.slices)])

    def per_block(self, draw: Callable[[np.random.Generator, tuple[int, ...]], np.ndarray], *tail: int) -> Callable[..., np.ndarray]:
        """A function returning the draws (BLOCK_STEPS, rows, *tail) of the next BLOCK_STEPS steps, each stream
        drawing its rows' part with draw(generator, shape) (e.g. Generator.random); with rows_first=True the
        same numbers as (rows, BLOCK_STEPS, *tail)."""

        def next_block(rows_first: bool = False) -> np.ndarray:
            parts = [draw(g, (self.BLOCK_STEPS, n, *tail)) for g, n in zip(self.generators, self.sizes)]
            return np.concatenate([p.swapaxes(0, 1) for p in parts]) if rows_first else np.concatenate(parts, axis=1)

        return next_block

    def per_step(self, draw: Callable[[np.random.Generator, tuple[int, ...]], np.ndarray], *tail: int) -> Callable[[], np.ndarray]:
        """A function returning the next step's draws (rows, *tail), drawn a block at a time (`per_block`)."""
        next_block = self.per_block(draw, *tail)
        block, used = np.empty((0,)), self.BLOCK_STEPS

        def next_step() -> np.ndarray:
            nonlocal block, used
            if used == self.BLOCK_STEPS:
                block, used = next_block(), 0
            used += 1
            return block[used - 1]

        return next_step


def linear_schedule(start: float, end: float, num_episodes: int) -> np.ndarray:
    """Value per episode index, from `start` at the first episode to `end` at the last."""
    return np.linspace(start, end, num_episodes) if num_episodes > 1 else np.array([start], dtype=np.float64)


def per_step_schedule(start: float, end: float, num_steps: int, decay_fraction: float) -> np.ndarray:
    """Value per nominal step: linear from `start` at step 0 to `end` at step decay_fraction * num_steps,
    then `end`. AD-epsilon (corl-team/ad-eps, generate_trajectories.py) lowers epsilon by
    (1 - floor) / (0.9 * steps) after every step, from 1 down to its floor."""
    return np.interp(np.arange(num_steps), [0.0, decay_fraction * num_steps], [start, end])


class EpsilonGreedy:
    """Epsilon-greedy exploration with epsilon given per nominal step: with probability epsilon a uniform
    random action, else the greedy one. Both draws (u ~ U(0, 1) and the random action) are made for every
    row and step, in blocks; when all rows are at the same step (a plain int), which of them explore is
    decided for the whole block at once, so a step costs one selection."""

    def __init__(self, epsilons: np.ndarray, num_actions: int, streams: RowStreams):
        self.epsilons = epsilons
        self.uniforms = streams.per_block(np.random.Generator.random)
        self.random_actions = streams.per_block(lambda g, shape: g.integers(0, num_actions, shape))
        self.used = RowStreams.BLOCK_STEPS

    def __call__(self, greedy: np.ndarray, steps: np.ndarray | int) -> np.ndarray:
        if self.used == RowStreams.BLOCK_STEPS:
            self.u, self.random, self.used = self.uniforms(), self.random_actions(), 0
            if isinstance(steps, (int, np.integer)):  # the block's steps are steps, steps + 1, ...
                self.explore = self.u < self.epsilons.take(np.arange(steps, steps + RowStreams.BLOCK_STEPS), mode="clip")[:, None]
        i = self.used
        self.used += 1
        explore = self.explore[i] if isinstance(steps, (int, np.integer)) else self.u[i] < self.epsilons.take(steps, mode="clip")
        return np.where(explore, self.random[i], greedy)


class QLearning:
    """Tabular Q-learning (Watkins 1989), epsilon-greedy with epsilon annealed linearly across the history.

    Bootstraps through truncation (time limits) and not through termination. The table starts at tiny
    random values (below 1e-6, far under any reward) so that greedy ties between untried actions break
    at random instead of always favouring action 0.
    """

    @dataclass(frozen=True)
    class Config:
        learning_rate: float = 0.3
        gamma: float = 0.9
        epsilon_start: float = 1.0
        epsilon_end: float = 0.02

    def __init__(self, env, num_episodes: int, streams: RowStreams, config: QLearning.Config):
        self.config = config
        self.num_actions = env.num_actions
        # one (state, action) table per row, flattened to (rows * states, actions): row r's state s is row r * states + s
        self.q = streams.each(lambda g, rows: g.uniform(0.0, 1e-6, ((rows.stop - rows.start) * env.num_states, env.num_actions)))
        self.q_flat = self.q.reshape(-1)
        self.explore = EpsilonGreedy(
            np.repeat(linear_schedule(config.epsilon_start, config.epsilon_end, num_episodes), env.horizon), env.num_actions, streams
        )
        self.row_starts = np.arange(env.num_envs) * env.num_actions

    def act(self, states, steps):
        return self.explore(self.q.take(states, axis=0).argmax(axis=1), steps)

    def update(self, state_actions, rewards, next_states, terminated):
        c = self.config
        q_next = self.q.take(next_states, axis=0)
        best_next = q_next.take(q_next.argmax(axis=1) + self.row_starts)  # max via argmax: faster on a short last axis
        if terminated is not None:
            best_next[terminated] = 0.0
        target = rewards + c.gamma * best_next
        current = self.q_flat.take(state_actions)
        self.q_flat[state_actions] = current + c.learning_rate * (target - current)


class ADEpsilon:
    """The noise curriculum of AD-epsilon (Zisman et al. 2023, "Emergence of In-Context Reinforcement
    Learning from Noise Distillation"): the optimal policy with epsilon-greedy noise. Nothing is learned;
    the improvement is the schedule.

    Published schedule (the default, checked against corl-team/ad-eps `generate_trajectories.py`):
    epsilon falls linearly after every step, from 1 to its floor, which it reaches at 90% of the
    history's nominal steps (episodes x horizon). `per_episode_schedule = true` restores offbench's
    earlier schedule: one epsilon per episode, linear from start at the first to end at the last episode."""

    @dataclass(frozen=True)
    class Config:
        epsilon_start: float = 1.0
        epsilon_end: float = 0.0
        decay_fraction: float = 0.9
        per_episode_schedule: bool = False

        def __post_init__(self):
            if not 0.0 < self.decay_fraction <= 1.0:
                raise ValueError(f"decay_fraction must lie in (0, 1] (got {self.decay_fraction})")

    def __init__(self, env, num_episodes: int, streams: RowStreams, config: ADEpsilon.Config):
        self.policy = env.optimal_action_table()
        if config.per_episode_schedule:
            epsilons = np.repeat(linear_schedule(config.epsilon_start, config.epsilon_end, num_episodes), env.horizon)
        else:
            epsilons = per_step_schedule(config.epsilon_start, config.epsilon_end, num_episodes * env.horizon, config.decay_fraction)
        self.explore = EpsilonGreedy(epsilons, env.num_actions, streams)

    def act(self, states, steps):
        return self.explore(self.policy.take(states), steps)

    def update(self, state_actions, rewards, next_states, terminated):
        """The curriculum follows a fixed schedule and ignores what happens."""


class ArmStatistics:
    """Pull counts and reward sums per arm of every row: all that the bandit learners below update."""

    def __init__(self, env):
        self.counts = np.zeros((env.num_envs, env.num_actions))
        self.sums = np.zeros((env.num_envs, env.num_actions))

    def update(self, state_actions, rewards, next_states, terminated):
        """One state per row, so a row's flat state-action index is row * arms + arm."""
        self.counts.reshape(-1)[state_actions] += 1
        self.sums.reshape(-1)[state_actions] += rewards


class UCB1(ArmStatistics):
    """UCB1 (Auer et al. 2002): pull every arm once, then the arm maximising mean + sqrt(c ln t / n),
    with c = 2 as in the paper. Ties go to the lowest arm index."""

    @dataclass(frozen=True)
    class Config:
        exploration: float = 2.0

    def __init__(self, env, num_episodes: int, streams: RowStreams, config: UCB1.Config):
        super().__init__(env)
        self.config = config

    def act(self, states, steps):
        pulls = np.maximum(self.counts, 1)
        total = np.maximum(self.counts.sum(axis=1, keepdims=True), 1)
        index = self.sums / pulls + np.sqrt(self.config.exploration * np.log(total) / pulls)
        return np.argmax(np.where(self.counts == 0, np.inf, index), axis=1)


class ThompsonSampling(ArmStatistics):
    """Thompson sampling: Beta(1, 1) priors for Bernoulli arms; for Gaussian arms with known noise sigma,
    a Normal(prior_mean, prior_std^2) prior and its conjugate Normal posterior."""

    @dataclass(frozen=True)
    class Config:
        prior_mean: float = 0.5
        prior_std: float = 1.0

    def __init__(self, env, num_episodes: int, streams: RowStreams, config: ThompsonSampling.Config):
        super().__init__(env)
        self.config, self.streams = config, streams
        self.sigma = env.sigma
        # Gaussian arms draw one normal per arm at every step; Bernoulli arms (None) draw from their Beta posteriors
        self.normals = None if env.noise == "bernoulli" else streams.per_step(np.random.Generator.standard_normal, env.num_actions)

    def act(self, states, steps):
        if self.normals is None:
            successes, failures = 1.0 + self.sums, 1.0 + self.counts - self.sums
            samples = self.streams.each(lambda g, rows: g.beta(successes[rows], failures[rows]))
        else:
            prior_precision = 1.0 / self.config.prior_std**2
            precision = prior_precision + self.counts / self.sigma**2
            mean = (self.config.prior_mean * prior_precision + self.sums / self.sigma**2) / precision
            samples = mean + self.normals() / np.sqrt(precision)
        return np.argmax(samples, axis=1)


class DirichletPulls:
    """DPT's bandit roll-in (Lee et al. 2023; checked against `rollin_bandit` in
    jon--lee/decision-pretrained-transformer collect_data.py): every history pulls its arms i.i.d. from its
    own distribution p = (1 - w) Dirichlet(concentration) + w * onehot(k), with w uniform on {0, 0.1, ..., 1}
    and k a uniformly drawn arm. Nothing is learned and the pulls ignore the rewards, so how often an arm is
    pulled says nothing about whether it is the best: a model trained on these contexts must read the rewards."""

    learns = False  # a roll-in for DPT's contexts, not a learner: the generator's learning check does not apply

    @dataclass(frozen=True)
    class Config:
        concentration: float = 1.0

        def __post_init__(self):
            if self.concentration <= 0:
                raise ValueError(f"concentration must be positive (got {self.concentration})")

    def __init__(self, env, num_episodes: int, streams: RowStreams, config: DirichletPulls.Config):
        arms = env.num_actions

        def arm_distributions(g: np.random.Generator, rows: slice) -> np.ndarray:
            n = rows.stop - rows.start
            weight = g.integers(0, 11, size=n)[:, None] / 10.0
            point_mass = np.eye(arms)[g.integers(0, arms, size=n)]
            return (1.0 - weight) * g.dirichlet(np.full(arms, config.concentration), size=n) + weight * point_mass

        self.cumulative = np.cumsum(streams.each(arm_distributions), axis=1)
        self.uniforms = streams.per_step(np.random.Generator.random)

    def act(self, states, steps):
        drawn = (self.cumulative < self.uniforms()[:, None]).sum(axis=1)
        return np.minimum(drawn, self.cumulative.shape[1] - 1)  # a rounding-short last bin still names an arm

    def update(self, state_actions, rewards, next_states, terminated):
        """The pulls ignore what happens."""


class UniformStates:
    """DPT's roll-in for its grid tasks (Lee et al. 2023; checked against `rollin_mdp(env, "uniform")` in
    jon--lee/decision-pretrained-transformer collect_data.py, which draws `env.sample_state()` and
    `env.sample_action()` before every step): each transition starts in a state drawn uniformly over the
    task's states and takes a uniformly drawn action. A context is then a set of i.i.d. transitions spread
    over the room, not a path from the start, and it holds the goal's reward about as often as its cell is
    drawn. Every transition is its own one-step episode (`episode_horizon`), so the stored s' of each step
    is the cell that step led to."""

    learns = False  # a roll-in for DPT's contexts, not a learner: the generator's learning check does not apply
    ignores_task = True  # states and actions are drawn without looking at the task (offbench.generators.task_posterior)
    episode_horizon = 1  # the generator runs the task with one-step episodes, each from `start_states()`

    @dataclass(frozen=True)
    class Config:
        pass

    def __init__(self, env, num_episodes: int, streams: RowStreams, config: UniformStates.Config):
        self.start_states = streams.per_step(lambda g, shape: g.integers(0, env.num_states, shape))
        self.actions = streams.per_step(lambda g, shape: g.integers(0, env.num_actions, shape))

    def act(self, states, steps):
        return self.actions()

    def update(self, state_actions, rewards, next_states, terminated):
        """The roll-in ignores what happens."""


ALGORITHMS: dict[str, Callable[..., SourceAlgorithm]] = {
    "q-learning": QLearning,
    "ad-epsilon": ADEpsilon,
    "ucb": UCB1,
    "thompson": ThompsonSampling,
    "dirichlet": DirichletPulls,
    "uniform-states": UniformStates,
}


def make_config(algo: str, overrides: dict[str, Any]):
    """The algorithm's Config with overrides by name; ValueError naming an unknown one or a value of the
    wrong kind (a switch takes true or false, a number any int or float)."""
    cls = ALGORITHMS[algo].Config
    defaults = {name: f.default for name, f in cls.__dataclass_fields__.items()}
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"unknown hyper-parameter(s) {', '.join(unknown)} for {algo} (known: {', '.join(sorted(defaults)) or 'none'})")
    values = {}
    for name, value in overrides.items():
        switch = isinstance(defaults[name], bool)
        if switch != isinstance(value, bool) or not isinstance(value, (bool, int, float)):
            raise ValueError(f"hyper-parameter {name} of {algo} takes {'true or false' if switch else 'a number'} (got {value!r})")
        values[name] = value if switch else float(value)
    return cls(**values)
