"""Helpers the tests import (`from helpers import ...`; pytest puts tests/ on sys.path). Fixtures live in
conftest.py files, which are not for importing."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import pytest
import torch

from offbench.baselines.base import DatasetSpec

TRAINING_CONFIGS = Path(__file__).resolve().parent / "training" / "configs"


def require_extra(module: str, extra: str):
    """The optional module, or skip the calling test (or module, at import) naming the extra to install."""
    return pytest.importorskip(module, reason=f"needs {module}: pip install 'offbench[{extra}]'")


def offbench_command(*args: str) -> list[str]:
    """argv for `offbench ARGS` in a subprocess."""
    return [sys.executable, "-m", "offbench", *map(str, args)]


# ---------------------------------------------------------------------------------------------- runs


def read_jsonl(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def logged_metrics(run_dir: Path) -> list[dict]:
    """metrics.jsonl without the wall-clock field: what must be identical between two runs of the same seed."""
    return [{k: v for k, v in line.items() if k != "time_s"} for line in read_jsonl(Path(run_dir) / "metrics.jsonl")]


def interrupt_then_resume(cli, monkeypatch, baseline_cls, args: list, out: Path, stop_at: int, check_cut=None) -> Path:
    """Run `args` as run "cut" with a Ctrl-C (KeyboardInterrupt) in its `stop_at`-th update, then --resume it to the
    end; `check_cut(run_dir)` looks at the run between the two. Returns the run directory."""
    update, calls = baseline_cls.update, []

    def interrupted_update(self, batch):
        calls.append(1)
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        return update(self, batch)

    monkeypatch.setattr(baseline_cls, "update", interrupted_update)
    code, printed, _ = cli(*args, "--name", "cut")
    assert code == 130 and "--resume" in printed
    if check_cut is not None:
        check_cut(Path(out) / "cut")
    monkeypatch.setattr(baseline_cls, "update", update)
    code, _, err = cli("run", "baseline", baseline_cls.name, "--resume", Path(out) / "cut")
    assert code == 0, err
    return Path(out) / "cut"


def assert_resume_repeats_the_run(cli, monkeypatch, name: str, args: list, out: Path, stop_at: int) -> None:
    """`offbench ARGS --name cut` stopped by Ctrl-C at update `stop_at`, then `--resume`d, ends with the metrics
    and evaluations of the uninterrupted run `out / "whole"`."""
    from offbench.baselines import get_baseline

    cut = interrupt_then_resume(cli, monkeypatch, get_baseline(name), args, out, stop_at)
    assert logged_metrics(cut) == logged_metrics(Path(out) / "whole")
    assert (cut / "evaluations.jsonl").read_text() == (Path(out) / "whole" / "evaluations.jsonl").read_text()


# ---------------------------------------------------------------------------------------------- datasets


def make_store(episode_lengths=(3, 5, 2), obs_dim=4, act_dim=2, terminal_last=(True, False, True), seed=0, **columns):
    """A small hand-built dataset: episode i has the given length; its last step terminates or is truncated."""
    from offbench.data.store import EpisodeStore

    rng = np.random.default_rng(seed)
    episodes = []
    for length, term in zip(episode_lengths, terminal_last):
        terminations = np.zeros(length, bool)
        truncations = np.zeros(length, bool)
        (terminations if term else truncations)[-1] = True
        ep = {
            "observations": rng.normal(size=(length + 1, obs_dim)).astype(np.float32),
            "actions": rng.uniform(-1, 1, size=(length, act_dim)).astype(np.float32),
            "rewards": rng.normal(size=length).astype(np.float32),
            "terminations": terminations,
            "truncations": truncations,
        }
        for name, fn in columns.items():
            ep[name] = fn(length)
        episodes.append(ep)
    return EpisodeStore.from_episodes(
        episodes,
        observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        action_space=gym.spaces.Box(-1, 1, (act_dim,), np.float32),
        card={"id": "test/hand-built"},
    )


# ------------------------------------------------- tiny specs and batches for the Q-learning baselines (CQL, IQL)


def box_spec(obs_dim=3, act_dim=1, low=-1.0, high=1.0) -> DatasetSpec:
    return DatasetSpec(
        observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        action_space=gym.spaces.Box(low, high, (act_dim,), np.float32),
        observation_shape=(obs_dim,),
        action_dim=act_dim,
        discrete=False,
        max_episode_length=10,
    )


def discrete_spec(obs_dim=3, n=3) -> DatasetSpec:
    return DatasetSpec(
        observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        action_space=gym.spaces.Discrete(n),
        observation_shape=(obs_dim,),
        action_dim=n,
        discrete=True,
        max_episode_length=10,
    )


def bandit_batch(gen: torch.Generator, n=64, obs_dim=3, actions=None) -> dict[str, torch.Tensor]:
    """One-step episodes (terminal after every step) whose reward is the first observation coordinate."""
    obs = torch.randn(n, obs_dim, generator=gen)
    if actions is None:
        actions = torch.rand(n, 1, generator=gen) * 2 - 1
    return {
        "observations": obs,
        "actions": actions,
        "rewards": obs[:, 0].clone(),
        "next_observations": torch.randn(n, obs_dim, generator=gen),
        "terminals": torch.ones(n),
    }


def best_action_batch(gen: torch.Generator, n=64, n_actions=3) -> dict[str, torch.Tensor]:
    """One-step episodes with uniformly random discrete actions; reward 1 for the action equal to the argmax of
    the observation (obs_dim == n_actions), so the best action is known in every state."""
    batch = bandit_batch(gen, n=n, obs_dim=n_actions)
    batch["actions"] = torch.randint(0, n_actions, (n,), generator=gen)
    batch["rewards"] = (batch["actions"] == batch["observations"].argmax(-1)).float()
    return batch


def greedy_accuracy(policy, n_actions=3) -> float:
    obs = np.random.default_rng(1).normal(size=(200, n_actions)).astype(np.float32)
    actions = policy.act(obs)
    assert actions.dtype == np.int64 and actions.shape == (200,)
    return float(np.mean(actions == obs.argmax(-1)))


# ---------------------------------------------------------------------------------------------- XLand


def tiny_rulesets() -> dict[str, np.ndarray]:
    """Four rulesets: 'go next to the ball of colour c' (c = red, green, blue, yellow), no rules, one ball."""
    require_extra("xminigrid", "xland")
    import jax.numpy as jnp
    from xminigrid.core.constants import Colors, Tiles
    from xminigrid.core.goals import AgentNearGoal
    from xminigrid.core.rules import EmptyRule

    colours = (Colors.RED, Colors.GREEN, Colors.BLUE, Colors.YELLOW)
    return {
        "goals": np.stack([np.asarray(AgentNearGoal(tile=jnp.array([Tiles.BALL, c], dtype=jnp.uint8)).encode()) for c in colours]),
        "rules": np.stack([np.asarray(EmptyRule().encode())[None] for _ in colours]),
        "init_tiles": np.array([[[Tiles.BALL, c]] for c in colours], np.uint8),
        "num_rules": np.zeros(len(colours), np.int64),
    }


def registered_xland_card(
    home, tmp_path, held_out: int, rulesets: dict[str, np.ndarray], tasks: int = 3, max_steps: int = 10, in_place: bool = True
) -> dict:
    """A user card for a synthetic XLand file (rulesets 0 .. tasks - 1), already in place as after a download
    unless `in_place` is false (its URL then reaches nothing), and a tiny ruleset file."""
    import tomli_w

    from offbench.data.xland import write_xland_file
    from offbench.envs.xland import write_rulesets

    if in_place:
        raw = home / "data" / "test" / "xland" / "raw"
        raw.mkdir(parents=True)
        write_xland_file(raw / "data.hdf5", tasks, 2, 300, chunk_steps=128)
    card = {
        "id": "test/xland",
        "description": "test",
        "format": "xland",
        "kind": "learning-history",
        "source": {"files": [{"url": "http://127.0.0.1:9/data.hdf5"}]},
        "env": {
            "suite": "xland",
            "id": "XLand-MiniGrid-R1-9x9",
            "kwargs": {"rulesets_file": str(write_rulesets(tmp_path / "rulesets", rulesets)), "max_steps": max_steps},
        },
        "split": {"held_out": held_out, "seed": 0},
    }
    (home / "datasets").mkdir(parents=True)
    (home / "datasets" / "xland.toml").write_text(tomli_w.dumps(card))
    return card


def slowed(work: Callable[..., Any], started: threading.Event, note: Callable[..., None] = lambda *args: None) -> Callable[..., Any]:
    """`work` that first sets `started`, records its arguments with `note` and lasts half a second longer: a
    training that another process asks for while it runs."""

    def slow(*args):
        note(*args)
        started.set()
        time.sleep(0.5)
        return work(*args)

    return slow


def race(first: Callable[[], None], second: Callable[[], None], started: threading.Event) -> None:
    """Run `first` in a thread, and `second` in another once `first` has set `started`; wait for both."""
    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert started.wait(timeout=60)
    threads.append(threading.Thread(target=second))
    threads[1].start()
    for thread in threads:
        thread.join()
