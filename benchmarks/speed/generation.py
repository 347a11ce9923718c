"""Generation speed: how many learning-history transitions per second does offbench write (HDF5 and checksum
included), against a plain vectorised NumPy loop that writes no file, timed in the same run?

    unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
    .venv/bin/python benchmarks/speed/generation.py            # full table, linearity up to 104M transitions (minutes)
    .venv/bin/python benchmarks/speed/generation.py --quick    # linearity up to 52M transitions (about a minute)

Answer: docs/results.md, "Speed", and benchmarks/speed/README.md, "Generation" (the full table, and how the
generator gets there).

Rows:
- `reference`: Dark Room tabular Q-learning written the obvious way, one process, one thread: N histories
  side by side, one vectorised step for all of them, the Q-table (N, states, actions) read and updated
  with fancy indexing, states, actions and rewards kept in preallocated (steps, N) arrays. No HDF5 file.
- `offbench (1 worker)`: `write_histories`, the dataset written to HDF5 (checksum included), one process, once
  with each inner loop (column `loop`: OFFBENCH_GENERATOR_LOOP=numpy or numba; numba already started in this
  process). Its ratio to the reference is the per-core speed-up.
- `offbench (W workers)`: the same on every core (wall clock). These four rows run in interleaved rounds
  (`--rounds`, default 3); each shows its median round.
- `cli`: `offbench generate darkroom --tasks 81 --held-out 16 --histories-per-task 8 --episodes 1000`
  as a subprocess, end to end (interpreter start, imports, numba's start where it runs, generation, write),
  bytecode and numba's cache written as after an install: with the loop offbench picks for this size, and with
  numba forced.
- Key-to-Door, Dark Room Hard and the AD-epsilon card size with each loop, the bandits (NumPy only), every core.
- Linearity: Dark Room Q-learning at growing numbers of episodes (520 histories), compiled loop, time per M
  transitions and the peak resident memory so far of this process and of any worker (it counts the file pages
  a worker wrote through its memory map).
Transitions/s wall-clock, and per CPU second (this process and its workers: the per-core speed, less
disturbed when the machine is shared); compare ratios within one run.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.common
from benchmarks.common import REPO, machine  # noqa: E402
from offbench.envs.darkroom import DarkRoomBatch  # noqa: E402
from offbench.envs.gridworld import next_cell_table  # noqa: E402
from offbench.generators.compiled import LOOPS, compile_loop, selected_loop  # noqa: E402
from offbench.generators.histories import HistoryRecipe, default_workers, write_histories  # noqa: E402
from offbench.generators.sources import QLearning, linear_schedule  # noqa: E402

CLI_ARGS = ["--tasks", "81", "--held-out", "16", "--histories-per-task", "8", "--episodes", "1000"]


def reference_q_learning(num_histories: int, episodes: int, seed: int = 0) -> int:
    """Plain vectorised Dark Room Q-learning (same hyper-parameters as offbench's); returns transitions made."""
    config, rng = QLearning.Config(), np.random.default_rng(seed)
    size, horizon, num_actions = 9, 20, 5
    goals = rng.integers(0, size * size, num_histories)
    next_cell = next_cell_table(size)
    q = rng.uniform(0.0, 1e-6, (num_histories, size * size, num_actions))
    rows = np.arange(num_histories)
    epsilons = linear_schedule(config.epsilon_start, config.epsilon_end, episodes)
    states = np.empty((episodes * horizon, num_histories), dtype=np.int64)
    actions = np.empty_like(states)
    rewards = np.empty((episodes * horizon, num_histories), dtype=np.float32)
    step = 0
    for episode in range(episodes):
        s = np.full(num_histories, (size // 2) * size + size // 2)
        for _ in range(horizon):
            greedy = q[rows, s].argmax(axis=1)
            explore = rng.random(num_histories) < epsilons[episode]
            a = np.where(explore, rng.integers(0, num_actions, num_histories), greedy)
            s_next = next_cell[s, a]
            r = (s_next == goals).astype(np.float32)
            target = r + config.gamma * q[rows, s_next].max(axis=1)
            q[rows, s, a] += config.learning_rate * (target - q[rows, s, a])
            states[step], actions[step], rewards[step] = s, a, r
            s, step = s_next, step + 1
    return step * num_histories


def children_peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (workers, subprocesses): with the machine
    shared, transitions per CPU second is the per-core speed, less disturbed than wall-clock."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(fn):
    wall, cpu = time.perf_counter(), cpu_seconds()
    result = fn()
    return result, time.perf_counter() - wall, cpu_seconds() - cpu


def timed_generation(folder: Path, label: str, benchmark: str, workers: int, loop: str, **params) -> dict:
    """write_histories of one recipe with the inner loop `loop`, timed."""
    recipe = HistoryRecipe.from_params(benchmark, {"allow_unlearned": True, **params})
    out = folder / f"{benchmark}-{workers}.h5"
    previous = os.environ.get("OFFBENCH_GENERATOR_LOOP")
    os.environ["OFFBENCH_GENERATOR_LOOP"] = loop
    try:
        _, wall, cpu = timed(lambda: write_histories(recipe, 0, out, workers=workers, check=False))
    finally:
        os.environ.pop("OFFBENCH_GENERATOR_LOOP")
        if previous:
            os.environ["OFFBENCH_GENERATOR_LOOP"] = previous
    from offbench.data.store import load_native

    n = load_native(out).num_transitions
    size = out.stat().st_size
    out.unlink()
    if loop == "numba" and recipe.algo not in ("q-learning", "ad-epsilon"):
        loop = "numpy"  # the bandit sources have no compiled loop
    return {
        "row": label,
        "benchmark": benchmark,
        "algo": recipe.algo,
        "loop": loop,
        "workers": workers,
        "transitions": n,
        "wall_s": wall,
        "M_per_s": n / wall / 1e6,
        "M_per_cpu_s": n / cpu / 1e6,
        "bytes_per_step": size / n,
        "peak_rss_so_far_MB": max(children_peak_rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def timed_cli(folder: Path, loop: str | None) -> dict:
    """The CLI as an installed offbench runs it, with inner loop `loop` (None: the one offbench picks): a first,
    small call writes offbench's bytecode cache (__pycache__, ignored by git), as pip does on install (and
    numba's cache, as a first generation would); where PYTHONDONTWRITEBYTECODE is set (as in this project's
    sandbox) every start would otherwise compile offbench's modules again."""
    env = {**os.environ, "OFFBENCH_HOME": str(folder / "home"), "PYTHONPATH": str(REPO)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("OFFBENCH_GENERATOR_LOOP", None)
    if loop:
        env["OFFBENCH_GENERATOR_LOOP"] = loop
    command = [sys.executable, "-m", "offbench", "generate", "darkroom"]
    for name in ("warm-up", "cli"):
        shutil.rmtree(folder / name, ignore_errors=True)
    subprocess.run(
        [*command, "--tasks", "3", "--held-out", "1", "--episodes", "10", "--out", str(folder / "warm-up"), "-q"],
        check=True,
        env=env,
        capture_output=True,
    )
    _, wall, cpu = timed(
        lambda: subprocess.run([*command, *CLI_ARGS, "--out", str(folder / "cli"), "-q"], check=True, env=env, capture_output=True)
    )
    n = 65 * 8 * 1000 * 20
    chosen = loop or selected_loop(1000 * 20, n // default_workers())
    return {
        "row": "cli (end to end)" + ("" if loop else ", loop offbench picks"),
        "benchmark": "darkroom",
        "algo": "q-learning",
        "loop": chosen,
        "workers": default_workers(),
        "transitions": n,
        "wall_s": wall,
        "M_per_s": n / wall / 1e6,
        "M_per_cpu_s": n / cpu / 1e6,
        "bytes_per_step": (folder / "cli" / "data.h5").stat().st_size / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the headline rows (interleaved; the median is shown)")
    args = parser.parse_args()
    workers = default_workers()
    darkroom = {"algo": "q-learning", "tasks": 81, "held_out": 16, "histories_per_task": 8}
    rows = []
    with tempfile.TemporaryDirectory(prefix="offbench-generation-bench-") as tmp:
        folder = Path(tmp)
        # side by side: reference, offbench on one core, on every core, the CLI (same 10.4M transitions)
        n, wall, cpu = timed(lambda: reference_q_learning(520, 1000))
        rows.append(
            {
                "row": "reference (plain vectorised loop)",
                "benchmark": "darkroom",
                "algo": "q-learning",
                "loop": "-",
                "workers": 1,
                "transitions": n,
                "wall_s": wall,
                "M_per_s": n / wall / 1e6,
                "M_per_cpu_s": n / cpu / 1e6,
            }
        )
        compile_loop()  # numba started (its cache loaded or written) once, before the timed rows
        headline = [
            (label, count, loop)
            for label, count in (("offbench (1 worker)", 1), (f"offbench ({workers} workers)", workers))
            for loop in LOOPS
        ]
        rounds = [
            [timed_generation(folder, label, "darkroom", count, loop, **darkroom, episodes=1000) for label, count, loop in headline]
            for _ in range(args.rounds)
        ]  # interleaved, so that a slow spell of the machine hits every row alike
        for runs in zip(*rounds):  # the median round of each row
            rows.append(sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2] | {"rounds": len(runs)})
        rows.append(timed_cli(folder, None))
        rows.append(timed_cli(folder, "numba"))
        # the other benchmarks, every core
        others = [
            ("keydoor", {"algo": "q-learning", "tasks": 250, "held_out": 50, "histories_per_task": 1, "episodes": 2000}),
            ("darkroom-hard", {"algo": "q-learning", "tasks": 288, "held_out": 58, "histories_per_task": 1, "episodes": 2000}),
        ]
        if not args.quick:
            others.append(("darkroom", {"algo": "ad-epsilon", "tasks": 81, "held_out": 16, "episodes": 20000}))
        bandits = [
            ("bandit", {"algo": "ucb", "variant": "adversarial", "tasks": 5000, "held_out": 1000, "episodes": 100}),
            ("bandit", {"algo": "thompson", "variant": "adversarial", "tasks": 5000, "held_out": 1000, "episodes": 100}),
            ("bandit-gaussian", {"algo": "thompson", "tasks": 10200, "held_out": 200, "episodes": 500}),
        ]
        for (benchmark, params), loop in [(job, loop) for job in others for loop in LOOPS] + [(job, "numpy") for job in bandits]:
            rows.append(timed_generation(folder, "card size", benchmark, workers, loop, **params))
            print(rows[-1], file=sys.stderr, flush=True)
        # linearity in transitions
        for episodes in (250, 500, 1000, 2000, 5000) if args.quick else (1000, 2000, 5000, 10000):
            rows.append(timed_generation(folder, "linearity", "darkroom", workers, "numba", **darkroom, episodes=episodes))
            print(rows[-1], file=sys.stderr, flush=True)

    table = pd.DataFrame(rows)
    reference = table.iloc[0]["M_per_s"]
    table["x_reference"] = table["M_per_s"] / reference
    table["x_reference_per_cpu_s"] = table["M_per_cpu_s"] / table.iloc[0]["M_per_cpu_s"]
    print(f"measured {machine()}")
    with pd.option_context("display.width", 220, "display.max_columns", 20, "display.float_format", "{:.3f}".format):
        print(table.to_string(index=False))
    linear = table[table.row == "linearity"]
    slope, intercept = np.polyfit(linear.transitions / 1e6, linear.wall_s, 1)
    fit = slope * linear.transitions / 1e6 + intercept
    r2 = 1 - ((linear.wall_s - fit) ** 2).sum() / ((linear.wall_s - linear.wall_s.mean()) ** 2).sum()
    per_m = linear.wall_s / (linear.transitions / 1e6)
    row = lambda label, loop: table[(table.row == label) & (table.loop == loop)].iloc[0]  # noqa: E731
    for loop in LOOPS:
        one, every = row("offbench (1 worker)", loop), row(f"offbench ({workers} workers)", loop)
        print(
            f"\n{loop} loop: wall clock, offbench (1 worker) / reference = {one.x_reference:.2f}x; offbench ({workers} workers) / reference = "
            f"{every.x_reference:.2f}x ({every.M_per_s:.2f}M transitions/s); per CPU second, 1 worker / reference = {one.x_reference_per_cpu_s:.2f}x"
        )
    picked = table[table.row == "cli (end to end), loop offbench picks"].iloc[0]
    print(
        f"CLI end to end / reference: {picked.x_reference:.2f}x with the loop offbench picks ({picked.loop}), "
        f"{row('cli (end to end)', 'numba').x_reference:.2f}x with numba forced"
    )
    print(
        f"linearity (darkroom, 520 histories): wall_s = {slope:.3f} s per M transitions + {intercept:.3f} s, R^2 = {r2:.4f}; "
        f"s per M transitions from {per_m.iloc[0]:.3f} to {per_m.iloc[-1]:.3f}"
    )
    print(f"DarkRoomBatch observations stored as {DarkRoomBatch(np.array([[0, 0]])).compact_observations().dtype}")


if __name__ == "__main__":
    main()
