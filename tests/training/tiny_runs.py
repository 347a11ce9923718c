"""The run configs in tests/training/configs/ (`<name>-tiny.toml`, what the run tests pass as --config): each is a
short run (steps, batch, logging, evaluation and checkpoint schedule, below) of the baseline's own `tiny_config`
(its module's: the one tiny model per baseline), so a test's model never drifts from the contract's.

    python tests/training/tiny_runs.py   # rewrite them after changing a tiny_config or a run below

test_baseline_registry.py fails while a file is not what this makes."""

from __future__ import annotations

import sys
from pathlib import Path

import tomli_w

CONFIGS = Path(__file__).resolve().parent / "configs"
EVERY_20 = {"log_every": 10, "eval_every": 20, "checkpoint_every": 20}
RUNS: dict[str, dict] = {  # baseline -> its test run, and the source line saying what it is for
    "bc": dict(
        source="tests: a BC small enough to train 50 steps and evaluate 2 episodes in seconds",
        steps=50,
        batch_size=32,
        log_every=10,
        eval_every=25,
        eval_episodes=2,
        checkpoint_every=25,
    ),
    "dt": dict(
        source="tests: a DT small enough to train 50 steps and evaluate 2 episodes in seconds",
        steps=50,
        batch_size=8,
        log_every=10,
        eval_every=25,
        eval_episodes=2,
        checkpoint_every=25,
    ),
    "prompt-dt": dict(
        source="tests: a Prompt-DT small enough to train 40 steps and evaluate 1 episode per task in seconds",
        steps=40,
        batch_size=8,
        eval_episodes=1,
        **EVERY_20,
    ),
    "harmodt": dict(
        source="tests: a HarmoDT small enough to train 40 iterations (4 mask updates) and evaluate 1 episode per task in seconds",
        steps=40,
        batch_size=4,
        eval_episodes=1,
        **EVERY_20,
    ),
    "moore-bc": dict(
        source="tests: a moore-bc small enough to train 40 steps and evaluate 1 episode per task in seconds",
        steps=40,
        batch_size=16,
        eval_episodes=1,
        **EVERY_20,
    ),
    "moore-iql": dict(
        source="tests: a moore-iql small enough to train 40 steps and evaluate 1 episode per task in seconds",
        steps=40,
        batch_size=16,
        eval_episodes=1,
        **EVERY_20,
    ),
    "ad": dict(
        source="tests: an AD small enough to train 40 steps and evaluate 3 in-context episodes in seconds",
        steps=40,
        batch_size=4,
        eval_episodes=3,
        **EVERY_20,
    ),
    "dpt": dict(
        source="tests: a DPT small enough to train 40 steps and evaluate 3 in-context episodes in seconds",
        steps=40,
        batch_size=4,
        eval_episodes=3,
        **EVERY_20,
    ),
}


def run_config_text(name: str) -> str:
    """`<name>-tiny.toml` as it should read: the run, then the baseline's tiny_config."""
    from offbench.baselines import get_baseline

    tiny = get_baseline(name).tiny_config
    run = RUNS[name]
    clash = {key for key in set(run) & set(tiny) if run[key] != tiny[key]}
    assert not clash, f"{name}: the run and tiny_config disagree on {sorted(clash)}"
    return tomli_w.dumps({**run, **tiny})


def write_all() -> list[str]:
    """Rewrite every run config that is not what `run_config_text` makes; returns their names."""
    from offbench.utils import atomic_write_text

    changed = []
    for name in RUNS:
        path = CONFIGS / f"{name}-tiny.toml"
        text = run_config_text(name)
        if not path.exists() or path.read_text() != text:
            atomic_write_text(path, text)
            changed.append(path.name)
    return changed


if __name__ == "__main__":
    print("\n".join(f"rewrote {name}" for name in write_all()) or "all current")
    sys.exit(0)
