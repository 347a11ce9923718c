"""The generators' inner loop: a group of learning histories stepped together on the tabular form of their
environment, then laid out history by history.

The environment is used as tables (`tables()`: next state, reward and termination per row, state and
action), so one step of every history is a few `take` calls on flat indices. A step logs one int32 per
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
    noise = env_streams.per_step(env.reward_noise) if hasattr(env, "noisy_rewards") else None

    capacity = num_episodes * horizon  # the most steps a history can take
    sa_log = np.empty((capacity, rows), dtype=np.int32)
    ended_log = np.empty((capacity, rows), dtype=bool) if terminates else None
    reward_log = np.empty((capacity, rows), dtype=np.float32) if noise is not None else None
    start = offsets + env.start_state
    never = np.zeros(rows, dtype=bool)

    state, t = start.copy(), np.zeros(rows, dtype=np.int64)
    episode, episode_base = np.zeros(rows, dtype=np.int64), np.zeros(rows, dtype=np.int64)  # base: nominal step of t = 0
    length = np.full(rows, capacity, dtype=np.int64)  # logged steps per row
    step = 0
    while step < capacity:
        action = algo.act(state, episode_base + t)
        sa = sa_log[step]
        np.add(state * actions, action, out=sa, casting="unsafe")
        next_state = next_flat.take(sa)
        reward = rewards_flat.take(sa)
        if noise is not None:
            reward = reward_log[step] = env.noisy_rewards(reward, noise())
        terminated = terminal_flat.take(sa) if terminates else never
        algo.update(state, action, reward, next_state, terminated)
        t += 1
        step += 1
        ended = (t == horizon) | terminated if terminates else (t == horizon)
        if ended_log is not None:
            ended_log[step - 1] = ended
        if ended.any():
            next_state = np.where(ended, start, next_state)
            t[ended] = 0
            episode += ended
            episode_base = np.minimum(episode, num_episodes - 1) * horizon
            done_now = ended & (episode == num_episodes)
            length[done_now] = step
            if (episode >= num_episodes).all():
                break
        state = next_state

    logged = np.arange(step)[None, :] < length[:, None]  # (rows, steps): each row logs its first length[r] steps
    sa = sa_log[:step].T[logged]
    ended = ended_log[:step].T[logged] if terminates else np.tile(np.arange(capacity) % horizon == horizon - 1, rows)
    flat_state = sa // actions
    action = (sa - flat_state * actions).astype(np.min_scalar_type(actions - 1))
    row = flat_state // states
    observations = env.compact_observations()
    terminated = terminal_flat.take(sa)
    expected = rewards_flat.take(sa)
    episode_lengths = np.diff(np.concatenate([[0], np.flatnonzero(ended) + 1]))
    episode_starts = np.concatenate([[0], np.cumsum(episode_lengths)[:-1]])
    optimal = env.optimal_action_table().take(flat_state).astype(action.dtype)
    final_flat = next_flat.take(sa[ended])
    return {
        "observations": observations[flat_state - offsets.take(row)],
        "actions": action,
        "rewards": reward_log[:step].T[logged] if reward_log is not None else expected.astype(np.float32),
        "terminations": terminated,
        "truncations": ended & ~terminated,
        "final_observations": observations[final_flat - offsets.take(row[ended])],
        "row": row,
        "episode_in_history": np.repeat(np.tile(np.arange(num_episodes, dtype=np.int32), rows), episode_lengths),
        "optimal_action": optimal,
        "episode_lengths": episode_lengths,
        "scores": np.add.reduceat(expected.astype(np.float64), episode_starts).reshape(rows, num_episodes),
        "optimal_rate": (np.add.reduceat(action == optimal, episode_starts) / episode_lengths).reshape(rows, num_episodes),
    }
