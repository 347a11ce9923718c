"""Learning-history generation speed: transitions per second, and time against transitions (linearity).

    PYTHONPATH=. python benchmarks/generation.py            # full table (about a minute)
    PYTHONPATH=. python benchmarks/generation.py --quick    # smaller sizes

Measures `run_histories` (everything but the HDF5 write) for Dark Room tabular Q-learning and Bernoulli
bandit UCB1 at several numbers of histories, wall-clock and CPU time (the process is single-threaded, so
CPU time is what an idle core would take; wall time includes whatever else the machine is doing).
The reference row runs the same Q-learning as a plain Python loop over one Gymnasium Dark Room per
history, the way a non-vectorised generator would, to give the speed-up as a ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from offbench.envs.darkroom import DarkRoomEnv
from offbench.generators.histories import HistoryRecipe, run_histories
from offbench.generators.sources import QLearning, linear_schedule


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def measure(benchmark: str, algo: str, tasks: int, held_out: int, histories: int, episodes: int) -> dict:
    recipe = HistoryRecipe.from_params(
        benchmark, {"algo": algo, "tasks": tasks, "held_out": held_out, "histories_per_task": histories, "episodes": episodes}
    )
    (store, _), wall, cpu = timed(lambda: run_histories(recipe, seed=0))
    n = store.num_transitions
    return {"benchmark": benchmark, "algo": algo, "histories": (tasks - held_out) * histories, "episodes": episodes,
            "transitions": n, "wall_s": wall, "cpu_s": cpu, "M_transitions_per_s_wall": n / wall / 1e6,
            "M_transitions_per_s_cpu": n / cpu / 1e6}


def python_loop_reference(num_histories: int, episodes: int) -> dict:
    """Tabular Q-learning, one DarkRoomEnv per history, one Python step at a time (same hyper-parameters)."""
    config, rng = QLearning.Config(), np.random.default_rng(0)
    epsilons = linear_schedule(config.epsilon_start, config.epsilon_end, episodes)

    def run():
        steps = 0
        for h in range(num_histories):
            env, q = DarkRoomEnv(goal=(h % 9, (h * 4) % 9)), np.zeros((9, 9, 5))
            for e in range(episodes):
                (x, y), _ = env.reset()
                done = False
                while not done:
                    a = int(rng.integers(5)) if rng.random() < epsilons[e] else int(np.argmax(q[x, y]))
                    (nx, ny), r, term, trunc, _ = env.step(a)
                    q[x, y, a] += config.learning_rate * (r + config.gamma * (0.0 if term else q[nx, ny].max()) - q[x, y, a])
                    x, y, done, steps = nx, ny, term or trunc, steps + 1
        return steps

    n, wall, cpu = timed(run)
    return {"benchmark": "darkroom (python loop reference)", "algo": "q-learning", "histories": num_histories, "episodes": episodes,
            "transitions": n, "wall_s": wall, "cpu_s": cpu, "M_transitions_per_s_wall": n / wall / 1e6,
            "M_transitions_per_s_cpu": n / cpu / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (seconds)")
    args = parser.parse_args()
    scale = 4 if args.quick else 1

    rows = [python_loop_reference(4, 200 // scale)]
    # throughput against the number of histories run together (65 training goals x histories per goal)
    for tasks, held_out, histories in ((9, 1, 1), (81, 16, 1), (81, 16, 4), (81, 16, 16)):
        rows.append(measure("darkroom", "q-learning", tasks, held_out, histories, 500 // scale))
    # linearity: the same 260 histories, more and more episodes
    for episodes in (250, 500, 1000, 2000):
        rows.append(measure("darkroom", "q-learning", 81, 16, 4, episodes // scale))
    for tasks in (100, 1000, 10_000):
        rows.append(measure("bandit", "ucb", tasks, 0, 1, 100))

    table = pd.DataFrame(rows)
    reference = table.iloc[0]["M_transitions_per_s_cpu"]
    table["speedup_cpu_vs_python_loop"] = table["M_transitions_per_s_cpu"] / reference
    linear = table[(table.benchmark == "darkroom") & (table.histories == 260)]
    slope = np.polyfit(linear.transitions, linear.cpu_s, 1)
    fit = np.polyval(slope, linear.transitions)
    r2 = 1 - ((linear.cpu_s - fit) ** 2).sum() / ((linear.cpu_s - linear.cpu_s.mean()) ** 2).sum()
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3f}".format):
        print(table.to_string(index=False))
    print(f"\nlinearity (darkroom, 260 histories): cpu_s = {slope[0] * 1e6:.3f} s per M transitions + {slope[1]:.3f} s, R^2 = {r2:.4f}")


if __name__ == "__main__":
    main()
