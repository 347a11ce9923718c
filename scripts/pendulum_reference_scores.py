"""Measure the reference scores of the `pendulum-scripted` card (datasets/pendulum-scripted.toml).

ref_min: mean return of the uniform random policy; ref_max: mean return of the noiseless scripted
controller the data is collected with. Both over the same reset seeds (0 .. episodes - 1), which are
disjoint from evaluation's seeds (10_000 + 1_000 * seed + episode). Prints the [scores] table to paste.

    .venv/bin/python scripts/pendulum_reference_scores.py --episodes 100
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

from offbench.generators.gym_episodes import rollout
from offbench.generators.pendulum import ENV_ID, scripted_action


def mean_return(act, episodes: int) -> float:
    env = gym.make(ENV_ID)
    returns = [float(rollout(env, act, reset_seed=i)["rewards"].astype(np.float64).sum()) for i in range(episodes)]
    env.close()
    return float(np.mean(returns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()
    space = gym.make(ENV_ID).action_space
    space.seed(0)
    random_return = mean_return(lambda _obs: space.sample(), args.episodes)
    scripted_return = mean_return(scripted_action, args.episodes)
    how = (
        f"scripts/pendulum_reference_scores.py --episodes {args.episodes}: mean return over reset seeds "
        f"0..{args.episodes - 1}; ref_min = uniform random actions (action_space seeded 0), "
        "ref_max = the noiseless scripted controller"
    )
    print("[scores]")
    print(f"ref_min = {random_return:.6f}")
    print(f"ref_max = {scripted_return:.6f}")
    print(f'measured = "{how}"')


if __name__ == "__main__":
    main()
