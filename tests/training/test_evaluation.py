"""Evaluation rollouts: batched episodes equal one-at-a-time rollouts, success counts if true at ANY step."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from offbench.data.cards import get_card
from offbench.evaluation.rollout import evaluation_record, evaluation_seed, run_episodes
from offbench.generators.gym_episodes import rollout
from offbench.generators.pendulum import scripted_action
from offbench.records import to_dict


class ScriptedPolicy:
    """The data's own controller, as a Policy; records what observe() is told."""

    def reset(self, num_envs):
        self.observed = []

    def act(self, observations):
        return scripted_action(observations)

    def observe(self, rewards, dones):
        self.observed.append((rewards.copy(), dones.copy()))


class FlakySuccessEnv(gym.Env):
    """Episode length 3 + seed % 3; reports success=True only at step 2 when the seed is even."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seed_value, self.t = seed, 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        info = {"success": self.t == 2 and self.seed_value % 2 == 0}
        return np.zeros(1, np.float32), 1.0, False, self.t >= 3 + self.seed_value % 3, info


class ConstantPolicy:
    def reset(self, num_envs):
        self.num_envs = num_envs

    def act(self, observations):
        return np.zeros(len(observations), dtype=np.int64)

    def observe(self, rewards, dones):
        pass


def test_batched_rollouts_equal_sequential_ones():
    seeds = [evaluation_seed(0, i) for i in range(3)]
    policy = ScriptedPolicy()
    results = run_episodes(policy, lambda: gym.make("Pendulum-v1"), seeds)
    env = gym.make("Pendulum-v1")
    expected = [float(rollout(env, scripted_action, seed)["rewards"].astype(np.float64).sum()) for seed in seeds]
    np.testing.assert_allclose(results.returns, expected, rtol=1e-5)
    assert results.lengths == [200, 200, 200] and results.successes is None
    assert len(policy.observed) == 200 and policy.observed[-1][1].all()


def test_success_counts_if_reported_at_any_step_and_finished_envs_stop():
    results = run_episodes(ConstantPolicy(), FlakySuccessEnv, [0, 1, 2, 4])
    assert results.lengths == [3, 4, 5, 4]  # each env stopped at its own end
    assert results.returns == [3.0, 4.0, 5.0, 4.0]
    assert results.successes == [True, False, True, True]  # success at step 2 only, false at the end
    record = evaluation_record(7, results, None, None)
    assert record.success_rate == 0.75 and record.normalized_score is None and record.step == 7
    assert to_dict(record) == {
        "step": 7,
        "returns": [3.0, 4.0, 5.0, 4.0],
        "lengths": [3, 4, 5, 4],
        "mean_return": 4.0,
        "normalized_score": None,
        "success_rate": 0.75,
        "target_return": None,
    }  # nulls written, as before


def test_normalised_score_uses_the_card():
    card = get_card("pendulum-scripted")
    results = run_episodes(ScriptedPolicy(), lambda: gym.make("Pendulum-v1"), [evaluation_seed(1, 0)])
    record = evaluation_record(0, results, card, None)
    assert record.normalized_score == 100 * (record.mean_return - card.ref_min_score) / (card.ref_max_score - card.ref_min_score)


def test_evaluation_seeds_are_distinct_per_training_seed_and_episode():
    seeds = {evaluation_seed(s, e) for s in range(10) for e in range(100)}
    assert len(seeds) == 1000 and min(seeds) >= 10_000
