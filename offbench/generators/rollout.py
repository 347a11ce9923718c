"""The generators' inner loop: a group of learning histories stepped together on the tabular form of their
environment, then laid out history by history.

The environment is used as tables (`tables()`: next state, reward and termination per row, state and
action), so one step of every history is a few `take` calls on flat indices. A step logs one int64 per
history (its flat state-action index, row * states * actions + state * actions + action) and whether the
episode ended there; observations, actions, rewards, flags, optimal actions and scores are derived from
that log after the loop, in whole-array passes. Rows whose episodes end early (terminations) start their
next episode at once; a row that has finished its history keeps stepping unlogged until the last is done.
"""

from __future__ import annotations

import numpy as np

from offbench.generators.sources import RowStreams, SourceAlgorithm


def run_group(env, algo: SourceAlgorithm, num_episodes: int, env_streams: RowStreams) -> dict[str, np.ndarray]:
    """Every history of `env`'s rows for `num_episodes` episodes; returns the per-step arrays, history by
    history, plus `episode_lengths`, `scores` (expected reward per episode) and `optimal_rate` (share of
    optimal actions per episode), both (rows, episodes)."""
    rows, states, actions, horizon = env.num_envs, env.num_states, env.num_actions, env.horizon
    next_table, reward_table, terminal_table = env.tables()
    offsets = np.arange(rows, dtype=np.int64) * states
    next_flat = (next_table + offsets[:, None, None]).reshape(-1)  # flat next state of every flat (state, action)
    rewards_flat, terminal_flat = reward_table.reshape(-1), terminal_table.reshape(-1)
    terminates = bool(terminal_flat.any())
    lockstep = horizon == 1 or not terminates  # every episode lasts `horizon` steps: rows move together
    noise = env_streams.per_step(env.reward_noise) if hasattr(env, "noisy_rewards") else None

    capacity = num_episodes * horizon  # the most steps a history can take
    sa_log = np.empty((capacity, rows), dtype=np.int64)
    ended_log = None if lockstep else np.empty((capacity, rows), dtype=bool)
    reward_log = np.empty((capacity, rows), dtype=np.float32) if noise is not None else None
    start = offsets + env.start_state

    def one_step(state: np.ndarray, step: int, nominal) -> tuple[np.ndarray, np.ndarray | None]:
        """Act, move, learn; logs the step; returns the next states and (if any can) terminations."""
        action = algo.act(state, nominal)
        sa = np.multiply(state, actions, out=sa_log[step])
        sa += action
        next_state = next_flat.take(sa)
        reward = rewards_flat.take(sa)
        if noise is not None:
            reward = reward_log[step] = env.noisy_rewards(reward, noise())
        terminated = terminal_flat.take(sa) if terminates else None
        algo.update(sa, reward, next_state, terminated)
        return next_state, terminated

    step, state = 0, start
    length = np.full(rows, capacity, dtype=np.int64)  # logged steps per row
    if lockstep:  # the nominal step is the step, for every row
        while step < capacity:
            next_state, _ = one_step(state, step, step)
            step += 1
            state = next_state if step % horizon else start
    else:
        t, episode = np.zeros(rows, dtype=np.int64), np.zeros(rows, dtype=np.int64)
        episode_base = np.zeros(rows, dtype=np.int64)  # nominal step of the current episode's first step
        while step < capacity:
            next_state, terminated = one_step(state, step, episode_base + t)
            t += 1
            step += 1
            ended = ended_log[step - 1] = (t == horizon) | terminated
            if ended.any():
                next_state = np.where(ended, start, next_state)
                t[ended] = 0
                episode += ended
                episode_base = np.minimum(episode, num_episodes - 1) * horizon
                length[ended & (episode == num_episodes)] = step
                if (episode >= num_episodes).all():
                    break
            state = next_state

    return _lay_out(env, sa_log[:step], ended_log, reward_log, length, num_episodes)


def _lay_out(env, sa_log: np.ndarray, ended_log, reward_log, length: np.ndarray, num_episodes: int) -> dict[str, np.ndarray]:
    """The per-step arrays, history by history, from the (steps, rows) log: each row keeps its first
    length[row] steps. Everything is a lookup of the state-action index in a small per-group table."""
    rows, states, actions, horizon = env.num_envs, env.num_states, env.num_actions, env.horizon
    next_table, reward_table, terminal_table = env.tables()
    steps = len(sa_log)
    lockstep = ended_log is None  # every row logged every step, episodes of `horizon` steps
    keep = slice(None) if lockstep else (np.arange(steps)[None, :] < length[:, None]).reshape(-1)
    sa = np.ascontiguousarray(sa_log.T).reshape(-1)[keep]
    ended = np.tile(np.arange(steps) % horizon == horizon - 1, rows) if lockstep else np.ascontiguousarray(ended_log[:steps].T).reshape(-1)[keep]

    observations = env.compact_observations()
    action_dtype = np.min_scalar_type(actions - 1)
    state_of_sa = np.tile(np.repeat(np.arange(states), actions), rows)
    action = np.tile(np.arange(actions, dtype=action_dtype), rows * states).take(sa)
    optimal = env.optimal_action_table().astype(action_dtype).repeat(actions).take(sa)
    terminated = terminal_table.reshape(-1).take(sa)
    expected = reward_table.reshape(-1).take(sa)
    lengths = np.full(rows * num_episodes, horizon) if lockstep else np.diff(np.flatnonzero(ended), prepend=-1)
    starts = np.arange(0, len(sa), horizon) if lockstep else np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return {
        "observations": observations.take(state_of_sa, axis=0).take(sa, axis=0),
        "actions": action,
        "rewards": np.ascontiguousarray(reward_log[:steps].T).reshape(-1)[keep] if reward_log is not None else expected.astype(np.float32),
        "terminations": terminated,
        "truncations": ended & ~terminated,
        "final_observations": observations.take(next_table.reshape(-1).take(sa[ended]), axis=0),
        "row": np.repeat(np.arange(rows), length),
        "episode_in_history": np.repeat(np.tile(np.arange(num_episodes, dtype=np.int32), rows), lengths),
        "optimal_action": optimal,
        "episode_lengths": lengths,
        "scores": np.add.reduceat(expected, starts, dtype=np.float64).reshape(rows, num_episodes),
        "optimal_rate": (np.add.reduceat(action == optimal, starts, dtype=np.float64) / lengths).reshape(rows, num_episodes),
    }
