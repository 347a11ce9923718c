"""The language-model bandit player (offbench/agents/llm.py) against a chat-completions server on 127.0.0.1 that the
test starts: behind it a scripted player that reads the prompt's history and answers as UCB1 would, and switches
that make it answer malformed text, stall, rate-limit or refuse. No test reaches the outside network."""

from __future__ import annotations

import math

import numpy as np
import pytest

from offbench.agents.llm import BanditHistory, LLMBanditPolicy, LLMConfig, build_prompt, demonstration_histories, parse_arm
from offbench.envs.bandits import BanditBatch
from offbench.errors import OffbenchError
from tests.chat_server import ChatServer, ucb_answer
from tests.helpers import make_store


@pytest.fixture
def server_factory():
    servers = []

    def make(script=()):
        servers.append(ChatServer(script))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def play(policy: LLMBanditPolicy, means: np.ndarray, steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Pulls (steps, rows) and rewards, as the in-context protocol plays a bandit card (one pull per episode)."""
    env = BanditBatch(means, seed=seed)
    policy.reset(env.num_envs)
    observations, arms, rewards = env.reset(), [], []
    for _ in range(steps):
        actions = policy.act(observations)
        observations, reward, done, _ = env.step(actions)
        policy.observe(reward, done)
        arms.append(actions)
        rewards.append(reward)
    return np.array(arms), np.array(rewards)


def config(server, **overrides) -> LLMConfig:
    return LLMConfig(endpoint=server.url, model="scripted-ucb", timeout_s=0.3, **overrides)


def test_the_prompt_carries_the_history_so_a_ucb_model_plays_ucb(server_factory):
    server = server_factory()
    means = np.array([[0.1, 0.9, 0.4], [0.7, 0.2, 0.3]])
    policy = LLMBanditPolicy(config(server), num_arms=3)
    arms, rewards = play(policy, means, steps=12)
    # replay UCB1 on the same rewards: the model saw exactly the pulls and rewards that happened
    for row in range(2):
        history = BanditHistory(3)
        for t in range(12):
            expected = ucb_answer(build_prompt(history, policy.config, []))
            assert arms[t, row] == expected
            history.add(int(arms[t, row]), float(rewards[t, row]))
    assert policy.usage() == {
        "pulls": 24,
        "requests": 24,
        "prompt_tokens": 24 * 11,
        "completion_tokens": 24 * 3,
        "reasks": 0,
        "fallbacks": 0,
        "tokens_per_episode": [14.0] * 12,
    }


def test_malformed_answers_are_re_asked_then_fall_back_to_a_seeded_draw(server_factory):
    server = server_factory(["prose", "ok"])
    policy = LLMBanditPolicy(config(server, max_reasks=1), num_arms=3)
    policy.reset(1)
    assert policy.act(np.zeros((1, 1))).tolist() == [0]  # UCB's first pull, after one correction
    assert (policy.calls[0].reasks, policy.calls[0].fallback, policy.calls[0].requests) == (1, False, 2)
    assert server.requests[1]["messages"][-1]["content"].startswith("Reply with exactly one line, ARM:")
    assert server.requests[1]["messages"][-2] == {"role": "assistant", "content": "I would pull arm 1 now."}

    stubborn = server_factory(["prose", "garbage", "prose", "garbage"])
    policy = LLMBanditPolicy(config(stubborn, max_reasks=1, seed=7), num_arms=3)
    policy.reset(2)
    arms = policy.act(np.zeros((2, 1)))
    assert [c.fallback for c in policy.calls] == [True, True]
    assert arms.tolist() == np.random.default_rng(7).integers(0, 3, size=2).tolist()


def test_rate_limits_and_stalls_are_retried_and_a_refusal_is_one_line(server_factory):
    server = server_factory(["429", "slow", "ok"])
    policy = LLMBanditPolicy(config(server, max_retries=3), num_arms=2)
    policy.reset(1)
    assert policy.act(np.zeros((1, 1))).tolist() == [0]
    assert len(server.requests) == 3  # the 429, the stalled one (timed out), the answer

    refusing = server_factory(["401"])
    policy = LLMBanditPolicy(config(refusing), num_arms=2)
    policy.reset(1)
    with pytest.raises(OffbenchError, match=r"^http://127\.0\.0\.1:\d+/v1/chat/completions: HTTP 401 \(bad key\)$"):
        policy.act(np.zeros((1, 1)))

    down = server_factory(["429"] * 3)
    policy = LLMBanditPolicy(config(down, max_retries=2), num_arms=2)
    policy.reset(1)
    with pytest.raises(OffbenchError, match="gave up after 3 tries, last: HTTP 429"):
        policy.act(np.zeros((1, 1)))


def test_a_cached_run_replays_without_calls_and_the_key_is_never_written(server_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("OFFBENCH_TEST_KEY", "sk-secret-123")
    server = server_factory()
    means = np.array([[0.2, 0.8], [0.6, 0.5]])
    cache = tmp_path / "responses.jsonl"
    first = LLMBanditPolicy(config(server, api_key_env="OFFBENCH_TEST_KEY"), num_arms=2, cache_path=cache)
    arms, _ = play(first, means, steps=6)
    assert server.headers[0]["Authorization"] == "Bearer sk-secret-123"
    assert "sk-secret-123" not in cache.read_text()
    calls = len(server.requests)

    with open(cache, "a") as handle:
        handle.write('{"key": "torn')  # a run killed mid-write leaves half a line: skipped on reading
    again = LLMBanditPolicy(config(server, api_key_env="OFFBENCH_TEST_KEY"), num_arms=2, cache_path=cache)
    replayed, _ = play(again, means, steps=6)
    assert np.array_equal(replayed, arms) and len(server.requests) == calls
    assert again.usage()["requests"] == 0 and again.usage()["prompt_tokens"] == first.usage()["prompt_tokens"]


def test_prompt_variants_summary_hints_and_demonstrations():
    history = BanditHistory(3, [0, 1, 1], [1.0, 0.0, 1.0])
    summary = build_prompt(history, LLMConfig(history="summary"), [])[1]["content"]
    assert "arm 1: pulled 2 times, mean reward 0.500" in summary and "arm 2: never pulled" in summary and "pull 1:" not in summary
    hinted = build_prompt(history, LLMConfig(hints=True), [])[1]["content"]
    assert f"arm 0: {1.0 + math.sqrt(2 * math.log(3)):.3f}" in hinted and "arm 2: not pulled yet" in hinted

    history_ids = iter([0, 0, 1, 1, 2, 2])  # three histories of two one-pull episodes each
    store = make_store(
        episode_lengths=(1,) * 6, obs_dim=1, act_dim=1, terminal_last=(True,) * 6, history_id=lambda n: np.array([next(history_ids)])
    )
    store.actions[:] = np.array([[0], [1], [2], [2], [1], [0]])
    demos = demonstration_histories(store, count=2, num_arms=3, seed=0)
    assert len(demos) == 2 and all(len(d.arms) == 2 for d in demos)
    assert {tuple(d.arms) for d in demos} <= {(0, 1), (2, 2), (1, 0)}
    prompt = build_prompt(history, LLMConfig(), demos)[1]["content"]
    assert prompt.count("Example ") == 2 and prompt.index("Example 2") < prompt.index("Your pulls so far")


@pytest.mark.parametrize(
    "text, arm",
    [
        ("ARM: 2", 2),
        ("arm: 0.", 0),
        ("  ARM:1\n", 1),
        ("ARM: 3", None),
        ("I pick ARM: 1", None),
        ("ARM: 1\nARM: 2", None),
        ("2", None),
        ("", None),
    ],
)
def test_answers_are_parsed_strictly(text, arm):
    assert parse_arm(text, 3) == arm
