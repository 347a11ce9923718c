"""The run configs in tests/training/configs/ (`<name>-tiny.toml`, what the run tests pass as --config): each is a
short run (steps, batch, logging, evaluation and checkpoint schedule, below) of the baseline's own `tiny_config`
(its module's: the one tiny model per baseline), so a test's model never drifts from the contract's. `run_args`
spells the `offbench run baseline` command the run tests give; `long_bc_run` and `wait_for_step` serve the tests
that kill a run part-way.

    python tests/training/tiny_runs.py   # rewrite them after changing a tiny_config or a run below

test_baseline_registry.py fails while a file is not what this makes."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import tomli_w

CONFIGS = Path(__file__).resolve().parent / "configs"
EVERY_20 = {"log_every": 10, "eval_every": 20, "checkpoint_every": 20}
EVERY_25 = {"log_every": 10, "eval_every": 25, "checkpoint_every": 25}


def tiny_run(
    who: str, batch_size: int, eval_episodes: int, episodes: str, steps: int = 40, trains: str = "steps", schedule=EVERY_20
) -> dict:
    """A test run, its source line saying what it is for: `who` trains `steps` `trains` and evaluates `eval_episodes`
    `episodes` in seconds."""
    purpose = f"tests: {who} small enough to train {steps} {trains} and evaluate {eval_episodes} {episodes} in seconds"
    return dict(source=purpose, steps=steps, batch_size=batch_size, eval_episodes=eval_episodes, **schedule)


RUNS: dict[str, dict] = {  # baseline -> its test run
    "bc": tiny_run("a BC", 32, 2, "episodes", steps=50, schedule=EVERY_25),
    "dt": tiny_run("a DT", 8, 2, "episodes", steps=50, schedule=EVERY_25),
    "prompt-dt": tiny_run("a Prompt-DT", 8, 1, "episode per task"),
    "harmodt": tiny_run("a HarmoDT", 4, 1, "episode per task", trains="iterations (4 mask updates)"),
    "moore-bc": tiny_run("a moore-bc", 16, 1, "episode per task"),
    "moore-iql": tiny_run("a moore-iql", 16, 1, "episode per task"),
    "ad": tiny_run("an AD", 4, 3, "in-context episodes"),
    "dpt": tiny_run("a DPT", 4, 3, "in-context episodes"),
}


def run_config_text(name: str) -> str:
    """`<name>-tiny.toml` as it should read: the run, then the baseline's tiny_config."""
    from offbench.baselines import get_baseline

    tiny = get_baseline(name).tiny_config
    run = RUNS[name]
    clash = {key for key in set(run) & set(tiny) if run[key] != tiny[key]}
    assert not clash, f"{name}: the run and tiny_config disagree on {sorted(clash)}"
    return tomli_w.dumps({**run, **tiny})


def run_args(
    baseline: str, dataset: str, *options, tiny: bool = False, steps: int | None = None, out=None, name: str | None = None, **settings
) -> list:
    """`offbench run baseline` arguments: `<baseline>-tiny.toml` as --config when `tiny`, `options` as they are, each
    of `settings` as `--set key=value` in their order, then --steps, --out and --name where given."""
    args = ["run", "baseline", baseline, "--dataset", dataset, *options]
    if tiny:
        args += ["--config", CONFIGS / f"{baseline}-tiny.toml"]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    for flag, value in (("--steps", steps), ("--out", out), ("--name", name)):
        if value is not None:
            args += [flag, value]
    return args


def long_bc_run(out: Path, *options) -> list:
    """The tiny BC for 1200 steps, checkpointed every 400 and evaluated every 600: a run long enough to kill between
    a checkpoint and the next."""
    return run_args("bc", "pendulum-scripted", *options, tiny=True, steps=1200, log_every=50, checkpoint_every=400, eval_every=600, out=out)


def wait_for_step(metrics: Path, step: int, poll_s: float, timeout_s: float = 240) -> None:
    """Return once the run writing `metrics` has logged `step` or a later one, or after `timeout_s` (the caller's
    checks then find the run finished or not started)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if metrics.exists() and any(
            json.loads(line)["step"] >= step for line in metrics.read_text().splitlines()[-3:] if line.endswith("}")
        ):
            return
        time.sleep(poll_s)


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
