"""The language-model agent as the `llm` baseline: it meets the baseline contract, `offbench run baseline llm` on a
bandit card writes a tracked run whose evaluation is the in-context protocol's (regret, token usage), a re-evaluation
replays from the response cache without one new request, and a card that is not a bandit is refused in one line.
The endpoint is the scripted UCB1 server of tests/chat_server.py on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from offbench.baselines import get_baseline
from offbench.testing import check_baseline
from tests.chat_server import ChatServer


@pytest.fixture
def server():
    chat = ChatServer()
    yield chat
    chat.close()


def test_llm_meets_the_baseline_contract(bandit, server, tmp_path):
    cls = get_baseline("llm")
    check_baseline(cls, {**cls.tiny_config, "endpoint": server.url, "cache": str(tmp_path / "cache.jsonl")}, bandit)
    assert server.requests, "the contract's policies asked the endpoint"


def test_a_run_is_its_evaluation_and_replays_from_the_cache(bandit, server, run_cli, tmp_path):
    cache = tmp_path / "responses.jsonl"
    run_cli(
        "run",
        "baseline",
        "llm",
        "--dataset",
        "bandit-small",
        "--out",
        tmp_path,
        "--name",
        "ucb-model",
        "--set",
        f'endpoint="{server.url}"',
        "--set",
        'model="scripted-ucb"',
        "--set",
        f'cache="{cache}"',
        "--set",
        "eval_episodes=12",
        check=True,
    )
    run_dir = tmp_path / "ucb-model"
    record = json.loads((run_dir / "run.json").read_text())
    assert record["baseline"] == "llm" and record["config"]["model"] == "scripted-ucb" and record["config"]["steps"] == 1
    [line] = [json.loads(text) for text in (run_dir / "evaluations.jsonl").read_text().splitlines()]
    tasks = len(line["returns"])
    assert line["step"] == 1 and len(line["in_context_regret"]) == 12
    usage = line["policy_usage"]
    assert usage["pulls"] == usage["requests"] == 12 * tasks and usage["fallbacks"] == 0
    assert usage["tokens_per_episode"] == [14.0] * 12  # the server counts 11 + 3 tokens per answer
    assert all("No arm has been pulled yet." in body["messages"][1]["content"] for body in server.requests[:tasks])
    assert json.loads((run_dir / "summary.json").read_text())["final"]["regret"] == line["regret"]

    asked = len(server.requests)
    again = run_cli("evaluate", run_dir, check=True)
    assert len(server.requests) == asked, "a re-evaluation must replay from the cache"
    assert f"{line['regret']:.2f}" in again.stdout


def test_a_card_that_is_not_a_bandit_is_refused_in_one_line(darkroom, run_cli, tmp_path):
    proc = run_cli("run", "baseline", "llm", "--dataset", "darkroom-small", "--out", tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "llm plays bandits (one pull per episode)" in proc.stderr
    assert not any(tmp_path.iterdir())
