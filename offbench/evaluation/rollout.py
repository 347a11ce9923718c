"""Roll a `Policy` out for a fixed set of seeded episodes in the environment a dataset card names.

All episodes run side by side (one environment each, one batched `act` per step); an environment that
has finished stops stepping while the others go on. Episode i of a run with training seed s resets
with seed `evaluation_seed(s, i)`, the same at every evaluation, so learning curves compare like with
like, and apart from every seed used for training or data generation.

Scores: raw return; normalised score = 100 * (R - ref_min) / (ref_max - ref_min) from the card
(D4RL's definition) where it has reference scores; success rate where the environment reports
`info["success"]`, an episode counting as a success if it is true at ANY step (Meta-World's rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import gymnasium as gym
import numpy as np

from offbench.evaluation.live_rows import LiveRows
from offbench.evaluation.results import EvaluationRecord

if TYPE_CHECKING:  # the protocol only: importing it would pull in torch, which seeds and configs do not need
    from offbench.evaluation.policy import Policy


EVALUATION_SEED_BASE = 10_000  # above every seed the generators and training use
EPISODES_PER_SEED = 1_000  # evaluation seeds of training seed s: EVALUATION_SEED_BASE + EPISODES_PER_SEED * s + [0, 1000)
EPISODE_SEEDS_RULE = "10000 + 1000 * seed + episode"  # what run.json records


def evaluation_seed(seed: int, episode: int) -> int:
    """The reset seed of evaluation episode `episode` of a run trained with `seed`."""
    return EVALUATION_SEED_BASE + EPISODES_PER_SEED * seed + episode


@dataclass
class EpisodeResults:
    returns: list[float]
    lengths: list[int]
    successes: list[bool] | None  # None when the environment never reports success


def run_episodes(policy: Policy, make_env: Callable[[], gym.Env], seeds: list[int]) -> EpisodeResults:
    envs = [make_env() for _ in seeds]
    try:
        observations = np.stack([env.reset(seed=seed)[0] for env, seed in zip(envs, seeds)])
        count = len(envs)
        live = LiveRows(policy, count)
        active = np.ones(count, dtype=bool)
        returns, lengths = np.zeros(count), np.zeros(count, dtype=np.int64)
        successes, reports_success = np.zeros(count, dtype=bool), False
        while active.any():
            actions = live.act(observations)
            rewards, dones = np.zeros(count), ~active
            for i in np.flatnonzero(active):
                observation, reward, terminated, truncated, info = envs[i].step(actions[i])
                observations[i] = observation
                rewards[i] = reward
                lengths[i] += 1
                if "success" in info:
                    reports_success = True
                    successes[i] |= bool(info["success"])
                if terminated or truncated:
                    active[i], dones[i] = False, True
            returns += rewards
            live.observe(rewards, dones, active)
    finally:
        for env in envs:
            env.close()
    return EpisodeResults(returns=returns.tolist(), lengths=lengths.tolist(), successes=successes.tolist() if reports_success else None)


def evaluation_record(step: int, results: EpisodeResults, card: Any, target_return: float | None) -> EvaluationRecord:
    """One single-task evaluations.jsonl line (docs/run-directory.md)."""
    mean_return = float(np.mean(results.returns))
    normalized = card.normalise(mean_return) if card is not None else None
    return EvaluationRecord(
        step=step,
        returns=results.returns,
        lengths=results.lengths,
        mean_return=mean_return,
        normalized_score=None if normalized is None else float(normalized),
        success_rate=None if results.successes is None else float(np.mean(results.successes)),
        target_return=target_return,
    )
