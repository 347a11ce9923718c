"""The generators' inner loop: a group of learning histories stepped together on the tabular form of their
environment, and streamed out in blocks of time.

The environment is used as tables (`tables()`: next state, reward and termination per row, state and
action), so one step of every history is a few `take` calls on flat indices. A step logs one int64 per
history (its flat state-action index, row * states * actions + state * actions + action) and, where
episodes can end early, whether the episode ended there. Each full block of log (BLOCK_CELLS history-steps,
a few MB) goes to a sink and the log is reused, so a group's memory does not grow with its length:

- `LaidOut`, when every episode lasts `horizon` steps (the rows move in lockstep): the place of every
  step in the dataset is known in advance, so each block is laid out and written there at once.
- `Staged`, when episodes can end early: a history's place is known only once the histories before it
  have ended, so each block is kept, history by history, in small staging arrays (the state-action index
  within the row and the episode ends) and `lay_out_staged` writes the group when the places are known.

Everything stored (observations, actions, rewards, flags, optimal actions, scores) is a lookup of the
state-action index in a per-group table (`StepTables`), in whole-array passes (`lay_out`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from offbench.generators.compiled import compiled_source, run_span
from offbench.generators.sources import RowStreams, SourceAlgorithm

BLOCK_CELLS = 1 << 17  # history-steps per block of log: its lay-out works in cache

# the arrays of a learning-history dataset a group writes, per step and per episode (names of the native layout)
STEP_ARRAYS = (
    "observations",
    "actions",
    "rewards",
    "terminations",
    "truncations",
    "columns/history_id",
    "columns/task_id",
    "columns/episode_in_history",
    "columns/optimal_action",
)
EPISODE_ARRAYS = ("final_observations", "episode_ends")  # episode_ends[e] = episode_starts[e + 1]


def lockstep(env) -> bool:
    """True if every episode of every row lasts `horizon` steps (no termination before it)."""
    return env.horizon == 1 or not env.tables()[2].any()


def block_steps(rows: int, horizon: int) -> int:
    """Steps per block of log: whole episodes of lockstep rows, about BLOCK_CELLS history-steps."""
    return horizon * max(1, BLOCK_CELLS // (rows * horizon))


def run_group(
    env,
    algo: SourceAlgorithm,
    num_episodes: int,
    env_streams: RowStreams,
    sink,
    in_lockstep: bool,
    progress: Callable[[int], None],
    loop: str = "numpy",
) -> np.ndarray:
    """Every history of `env`'s rows for `num_episodes` episodes. Each block of log goes to
    sink(first_step, state_actions, ended, rewards), arrays (steps, rows): ended is None in lockstep,
    rewards None where they are the table's. progress(n): n more episodes done. `loop`: "numba" runs the
    compiled loop where the source has one (`compiled.py`; same bytes). A source with `start_states()` (a roll-in)
    gives each episode's first state itself. Returns the steps each history took."""
    group = Group(env, algo, num_episodes, env_streams, sink, in_lockstep, loop)
    if in_lockstep:
        return run_lockstep(group, progress)
    return StagedRun(group, progress).run()


class Group:
    """One group of histories being stepped: its environment as flat tables, its source, the block of log the
    steps go to and the rows' positions (state, step within the episode, episode). The lockstep and the staged
    runners drive it."""

    def __init__(self, env, algo: SourceAlgorithm, num_episodes: int, env_streams: RowStreams, sink, in_lockstep: bool, loop: str):
        self.env, self.algo, self.num_episodes, self.sink = env, algo, num_episodes, sink
        self.rows, states, self.actions, self.horizon = env.num_envs, env.num_states, env.num_actions, env.horizon
        next_table, reward_table, terminal_table = env.tables()
        self.offsets = np.arange(self.rows, dtype=np.int64) * states
        self.next_flat = (next_table + self.offsets[:, None, None]).reshape(-1)  # flat next state of every flat (state, action)
        self.rewards_flat, self.terminal_flat = reward_table.reshape(-1), terminal_table.reshape(-1)
        self.terminates = bool(self.terminal_flat.any())
        if in_lockstep and self.horizon > 1 and self.terminates:
            raise ValueError("episodes of these rows can end early: they cannot run in lockstep")
        self.noise = env_streams.per_step(env.reward_noise) if hasattr(env, "noisy_rewards") else None

        self.capacity = num_episodes * self.horizon  # the most steps a history can take
        self.block = block_steps(self.rows, self.horizon)
        self.reward_log = np.empty((self.block, self.rows), dtype=np.float32) if self.noise is not None else None
        self.start = self.offsets + env.start_state
        self.start_states = getattr(algo, "start_states", None)  # a roll-in that draws each episode's first state
        if self.start_states is not None and not in_lockstep:
            raise ValueError("a source that draws its episodes' start states runs in lockstep only")

        self.compiled = compiled_source(env, algo, loop)
        if self.compiled:  # the compiled loop logs rows first; the sinks get the same (steps, rows) arrays, as transposed views
            self.compiled_tables = self.compiled.tables(self.next_flat, self.rewards_flat, self.terminal_flat)
            self.sa_rows, self.ended_rows = np.empty((self.rows, self.block), dtype=np.int64), np.empty((self.rows, self.block), dtype=bool)
            self.sa_log, self.ended_log = self.sa_rows.T, None if in_lockstep else self.ended_rows.T
        else:
            self.sa_log = np.empty((self.block, self.rows), dtype=np.int64)
            self.ended_log = None if in_lockstep else np.empty((self.block, self.rows), dtype=bool)
        self.draws: list[np.ndarray] = []  # the compiled loop's current block of draws (uniforms, random actions)

        self.state = self.episode_start().copy()
        self.length = np.full(self.rows, self.capacity, dtype=np.int64)  # logged steps per row
        self.t, self.episode = np.zeros(self.rows, dtype=np.int64), np.zeros(self.rows, dtype=np.int64)
        self.finished_at = np.zeros(self.rows, dtype=np.int64)  # the compiled loop: the step after each row's last episode ended

    def episode_start(self) -> np.ndarray:
        return self.start if self.start_states is None else self.offsets + self.start_states()

    def one_step(self, i: int, nominal) -> tuple[np.ndarray, np.ndarray | None]:
        """Act from the rows' states, move, learn, logging the step in row i of the block; returns the next states
        and (if any can) terminations."""
        action = self.algo.act(self.state, nominal)
        sa = np.multiply(self.state, self.actions, out=self.sa_log[i])
        sa += action
        next_state = self.next_flat.take(sa)
        reward = self.rewards_flat.take(sa)
        if self.noise is not None and self.reward_log is not None:  # both set, or neither, in __init__
            reward = self.reward_log[i] = self.env.noisy_rewards(reward, self.noise())
        terminated = self.terminal_flat.take(sa) if self.terminates else None
        self.algo.update(sa, reward, next_state, terminated)
        return next_state, terminated

    def compiled_span(self, step: int) -> int:
        """Run the compiled loop from `step` over one span (within one block of log and one block of draws, a new
        block drawn when one starts); returns the step after it."""
        if self.compiled is None:
            raise ValueError("the compiled loop needs a compiled source (compiled_source)")
        per_block = RowStreams.BLOCK_STEPS
        if step % per_block == 0:
            self.draws[:] = self.compiled.draws()
        n = min(per_block - step % per_block, self.block - step % self.block, self.capacity - step)
        run_span(
            n,
            self.horizon,
            self.num_episodes,
            step,
            self.state,
            self.start,
            self.t,
            self.episode,
            self.finished_at,
            self.sa_rows,
            self.ended_rows,
            step % self.block,
            self.draws[0],
            self.draws[1],
            step % per_block,
            self.compiled_tables,
        )
        return step + n

    def flush(self, step: int) -> int:
        """Hand the logged steps (up to `step`) to the sink; returns how many there were."""
        n = (step - 1) % self.block + 1
        self.sink(
            step - n,
            self.sa_log[:n],
            None if self.ended_log is None else self.ended_log[:n],
            None if self.reward_log is None else self.reward_log[:n],
        )
        return n


def run_lockstep(group: Group, progress: Callable[[int], None]) -> np.ndarray:
    """Every row's episodes last `horizon` steps: the nominal step is the step, for every row."""
    step = 0
    while step < group.capacity:
        if group.compiled:
            step = group.compiled_span(step)
        else:
            next_state, _ = group.one_step(step % group.block, step)
            step += 1
            group.state = next_state if step % group.horizon else group.episode_start()
        if step % group.block == 0 or step == group.capacity:
            progress(group.rows * group.flush(step) // group.horizon)
    return group.length


class StagedRun:
    """A group whose episodes can end early: each row runs until its last episode ends, and its length is known
    once the block it ended in is flushed."""

    def __init__(self, group: Group, progress: Callable[[int], None]):
        if group.ended_log is None:
            raise ValueError("a staged run reads the episode ends its group logs, which a group in lockstep does not")
        self.group, self.progress, self.ended_log = group, progress, group.ended_log
        self.flushed_episodes = np.zeros(group.rows, dtype=np.int64)  # episodes each row had ended at the last flush
        self.flushed_step = 0

    def run(self) -> np.ndarray:
        step = self.run_compiled() if self.group.compiled else self.run_numpy()
        if step > self.flushed_step:
            self.flush_and_count(step)
        return self.group.length

    def run_compiled(self) -> int:
        group, step = self.group, 0
        while step < group.capacity:
            step = group.compiled_span(step)
            if group.episode.min() >= group.num_episodes:
                return int(group.finished_at.max())
            if step % group.block == 0:
                self.flush_and_count(step)
        return step

    def run_numpy(self) -> int:
        group, step = self.group, 0
        episode_base = np.zeros(group.rows, dtype=np.int64)  # nominal step of the current episode's first step
        while step < group.capacity:
            next_state, terminated = group.one_step(
                step % group.block, episode_base + group.t
            )  # past its history, a row's nominal steps run on
            group.t += 1
            step += 1
            ended = np.equal(group.t, group.horizon, out=self.ended_log[(step - 1) % group.block])
            if terminated is not None:
                ended |= terminated
            if ended.any():
                next_state = np.where(ended, group.start, next_state)
                group.t[ended] = 0
                group.episode += ended
                np.multiply(group.episode, group.horizon, out=episode_base)
                if group.episode.min() >= group.num_episodes:
                    return step
            if step % group.block == 0:
                self.flush_and_count(step)
            group.state = next_state
        return step

    def flush_and_count(self, step: int) -> None:
        """Flush the block up to `step`, then set the length of each history that ended its last episode in it (the
        step after that episode's end), and report progress."""
        group = self.group
        n = group.flush(step)
        episode, num_episodes = group.episode, group.num_episodes
        finishing = np.flatnonzero((self.flushed_episodes < num_episodes) & (episode >= num_episodes))
        if len(finishing):
            ends_so_far = self.flushed_episodes[finishing] + np.cumsum(self.ended_log[:n, finishing], axis=0)
            group.length[finishing] = step - n + (ends_so_far < num_episodes).sum(axis=0) + 1
        self.progress(int(np.minimum(episode, num_episodes).sum() - np.minimum(self.flushed_episodes, num_episodes).sum()))
        self.flushed_episodes[:], self.flushed_step = episode, step


def as_words(table: np.ndarray) -> np.ndarray:
    """A (n, ...) C-contiguous array as n scalars that each hold the bytes of one row (e.g. an (x, y) uint8
    observation as one uint16), so a row is copied by one `take`."""
    rows = table.reshape(len(table), -1)
    size = rows.dtype.itemsize * rows.shape[1]
    word = np.dtype(f"u{size}") if size in (1, 2, 4, 8) else np.dtype((np.void, size))
    return rows.view(word).reshape(len(table))


class StepTables:
    """What a step of the group stores, as tables over its flat state-action index."""

    def __init__(self, env):
        rows, states, actions = env.num_envs, env.num_states, env.num_actions
        next_table, reward_table, terminal_table = env.tables()
        observation = as_words(env.compact_observations())  # one word per state
        action_dtype = np.min_scalar_type(actions - 1)
        self.state_actions = states * actions  # per row
        self.observation = np.tile(observation.repeat(actions), rows)
        self.final_observation = observation.take(next_table.reshape(-1))  # after the step
        self.action = np.tile(np.arange(actions, dtype=action_dtype), rows * states)
        self.optimal_action = env.optimal_action_table().astype(action_dtype).repeat(actions)
        self.expected_reward = reward_table.reshape(-1)
        self.reward = self.expected_reward.astype(np.float32)
        self.terminated = terminal_table.reshape(-1)


def lay_out(
    tables: StepTables,
    sa: np.ndarray,
    ends: np.ndarray,
    rewards: np.ndarray | None,
    history_ids: np.ndarray,
    task_ids: np.ndarray,
    steps_per_row,
    first_episode: int,
) -> dict[str, np.ndarray]:
    """The stored arrays of consecutive steps of whole episodes, given history by history: sa (flat
    state-action indices), ends (where episodes end), rewards (None: the table's); the steps of row r
    (history_ids[r], task_ids[r]) are steps_per_row (one number, or one per row) and start its episode
    first_episode. Per-step arrays keep their dataset names; per episode: final_observations,
    episode_lengths, scores (expected reward) and optimal_rate (share of optimal actions)."""
    ends_at = np.flatnonzero(ends)
    lengths = np.diff(ends_at, prepend=-1)
    starts = ends_at - lengths + 1
    action = tables.action.take(sa)
    optimal = tables.optimal_action.take(sa)
    terminated = tables.terminated.take(sa)
    episodes_per_row = len(lengths) // len(history_ids)
    return {
        "observations": tables.observation.take(sa),
        "actions": action,
        "rewards": tables.reward.take(sa) if rewards is None else rewards,
        "terminations": terminated,
        "truncations": ends & ~terminated,
        "columns/history_id": np.repeat(history_ids, steps_per_row),
        "columns/task_id": np.repeat(task_ids, steps_per_row),
        "columns/episode_in_history": np.repeat(
            np.tile(np.arange(first_episode, first_episode + episodes_per_row, dtype=np.int32), len(history_ids)), lengths
        ),
        "columns/optimal_action": optimal,
        "final_observations": tables.final_observation.take(sa[ends_at]),
        "episode_lengths": lengths,
        "scores": np.add.reduceat(tables.expected_reward.take(sa), starts, dtype=np.float64),
        "optimal_rate": np.add.reduceat(action == optimal, starts, dtype=np.float64) / lengths,
    }


class LaidOut:
    """Sink of a lockstep group: lays each block out into `out`, the group's part of the dataset's arrays
    seen history by history (per-step arrays (rows, steps), per-episode ones (rows, episodes);
    observations as words). Keeps the scores and optimal-action rates, (rows, episodes)."""

    def __init__(
        self, tables: StepTables, out: dict[str, np.ndarray], history_ids: np.ndarray, task_ids: np.ndarray, first_step: int, horizon: int
    ):
        self.tables, self.out, self.history_ids, self.task_ids, self.horizon = tables, out, history_ids, task_ids, horizon
        self.row_first_step = first_step + np.arange(len(history_ids), dtype=np.int64) * out["actions"].shape[1]  # in the dataset
        shape = out["final_observations"].shape
        self.scores, self.optimal_rate = np.empty(shape), np.empty(shape)

    def __call__(self, first_step: int, sa: np.ndarray, ended: None, rewards: np.ndarray | None) -> None:
        n, rows = sa.shape
        h = self.horizon
        ends = np.tile(np.arange(first_step, first_step + n) % h == h - 1, rows)
        rows_first = lambda log: np.ascontiguousarray(log.T).reshape(-1)  # noqa: E731
        laid = lay_out(
            self.tables,
            rows_first(sa),
            ends,
            None if rewards is None else rows_first(rewards),
            self.history_ids,
            self.task_ids,
            n,
            first_step // h,
        )
        steps, episodes = slice(first_step, first_step + n), slice(first_step // h, (first_step + n) // h)
        for name in STEP_ARRAYS:
            self.out[name][:, steps] = laid[name].reshape(rows, n)
        lengths = laid["episode_lengths"].reshape(rows, -1)
        self.out["final_observations"][:, episodes] = laid["final_observations"].reshape(rows, -1)
        self.out["episode_ends"][:, episodes] = self.row_first_step[:, None] + first_step + np.cumsum(lengths, axis=1)
        self.scores[:, episodes] = laid["scores"].reshape(rows, -1)
        self.optimal_rate[:, episodes] = laid["optimal_rate"].reshape(rows, -1)


def staging_arrays(env, capacity: int, noisy: bool) -> dict[str, tuple[tuple[int, int], np.dtype]]:
    """(shape, dtype) of the staging arrays of a group whose episodes can end early (see `Staged`)."""
    shape = (env.num_envs, capacity)
    arrays = {"state_actions": (shape, np.min_scalar_type(env.num_states * env.num_actions - 1)), "ended": (shape, np.dtype(bool))}
    if noisy:
        arrays["rewards"] = (shape, np.dtype(np.float32))
    return arrays


class Staged:
    """Sink of a group whose episodes can end early: keeps each block in `staging` (arrays from
    `staging_arrays`), history by history: the state-action index within the row, the episode ends and
    the rewards drawn (if any)."""

    def __init__(self, tables: StepTables, staging: dict[str, np.ndarray]):
        self.staging = staging
        self.row_base = np.arange(staging["ended"].shape[0], dtype=np.int64) * tables.state_actions

    def __call__(self, first_step: int, sa: np.ndarray, ended: np.ndarray, rewards: np.ndarray | None) -> None:
        steps = slice(first_step, first_step + len(sa))
        self.staging["state_actions"][:, steps] = (sa - self.row_base).T
        self.staging["ended"][:, steps] = ended.T
        if rewards is not None:
            self.staging["rewards"][:, steps] = rewards.T


def lay_out_staged(
    tables: StepTables,
    staging: dict[str, np.ndarray],
    length: np.ndarray,
    history_ids: np.ndarray,
    task_ids: np.ndarray,
    num_episodes: int,
    out: dict[str, np.ndarray],
    first_step: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Write the staged histories of a group (history r took length[r] steps) into `out`, its part of the
    dataset's arrays (flat; observations as words; the group's first step is first_step in the dataset), a
    few rows at a time; returns the scores and optimal-action rates, (rows, episodes)."""
    rows, steps = len(length), int(length.max())
    scores, optimal_rate = np.empty((rows, num_episodes)), np.empty((rows, num_episodes))
    chunk = max(1, 8 * BLOCK_CELLS // steps)
    row_base = np.arange(rows, dtype=np.int64) * tables.state_actions
    done = 0
    for lo in range(0, rows, chunk):
        r = slice(lo, min(rows, lo + chunk))
        keep = np.arange(steps) < length[r, None]
        staged = {name: array[r, :steps][keep] for name, array in staging.items()}  # the `staging_arrays` of these rows
        laid = lay_out(
            tables,
            staged["state_actions"] + row_base[r].repeat(length[r]),
            staged["ended"],
            staged.get("rewards"),
            history_ids[r],
            task_ids[r],
            length[r],
            0,
        )
        n = int(length[r].sum())
        for name in STEP_ARRAYS:
            out[name][done : done + n] = laid[name]
        episodes = slice(r.start * num_episodes, r.stop * num_episodes)
        out["final_observations"][episodes] = laid["final_observations"]
        out["episode_ends"][episodes] = first_step + done + np.cumsum(laid["episode_lengths"])
        scores[r] = laid["scores"].reshape(-1, num_episodes)
        optimal_rate[r] = laid["optimal_rate"].reshape(-1, num_episodes)
        done += n
    return scores, optimal_rate
