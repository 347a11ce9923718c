"""Sweep throughput: how many runs per hour does `offbench sweep`'s local executor finish against the same runs
one after another, and what does the Ray executor add per run on the same machine, in one invocation?

    .venv/bin/python benchmarks/speed/sweep.py                             # 8 BC runs, 2000 updates each
    .venv/bin/python benchmarks/speed/sweep.py --runs 2 --steps 100        # quick
    .venv/bin/python benchmarks/speed/sweep.py --runs 16 --steps 5000 --no-ray

(`RAY_AUTH_MODE=disabled` and a scratch `HOME` keep Ray's token file out of your home.)

Answer: docs/results.md, "Speed", and benchmarks/speed/README.md, "Sweeps".

The runs: BC on `pendulum-scripted` (its standard config, seeds 0..N-1), `--steps` updates, one
5-episode evaluation at the end. Three ways, each into its own folder:

- sequential: `offbench run baseline ...` one after another, each with every core's torch threads
  (how leaderboards were populated before `offbench sweep`);
- local: `offbench.sweep` with the local executor (workers = cores, one thread each);
- ray: the Ray executor on a local cluster with as many CPUs as cores (ray.init timed apart: a cluster
  is started once per sweep, or not at all with --address), one CPU per run.

Runs per hour = runs / wall time of the whole batch; the Ray overhead per run is
(ray wall - local wall) / runs, both with the same number of runs at once.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.common
from benchmarks.common import print_table  # noqa: E402
from offbench.sweep import runner  # noqa: E402
from offbench.sweep.executors import LocalExecutor, offbench_argv, thread_env, usable_cores  # noqa: E402
from offbench.sweep.spec import load_sweep  # noqa: E402


def write_spec(folder: Path, runs: int, steps: int) -> Path:
    path = folder / "bench.toml"
    path.write_text(
        f'name = "bench"\nbaselines = ["bc"]\ndatasets = ["pendulum-scripted"]\nseeds = {list(range(runs))}\n'
        f"[set]\nsteps = {steps}\neval_every = {steps}\neval_episodes = 5\ncheckpoint_every = {steps}\nlog_every = {max(1, steps // 10)}\n"
    )
    return path


def sequential(spec_path: Path, out: Path, cores: int) -> float:
    spec = load_sweep(spec_path)
    begin = time.perf_counter()
    for run in spec.expand():
        argv = offbench_argv(
            "run",
            "baseline",
            run.baseline,
            "--dataset",
            run.dataset,
            "--seed",
            str(run.seed),
            "--out",
            str(out),
            "--name",
            run.name,
            *(a for o in run.overrides() for a in ("--set", o)),
        )
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **thread_env(cores)})
    return time.perf_counter() - begin


def with_executor(spec_path: Path, out: Path, executor) -> float:
    spec = load_sweep(spec_path)
    quiet = Console(file=open(os.devnull, "w"))
    begin = time.perf_counter()
    tracker = runner.execute(spec, spec.expand(), out, executor, quiet)
    wall = time.perf_counter() - begin
    executor.close()
    failed = [name for name, state in tracker.state.items() if state != runner.DONE]
    if failed:
        raise SystemExit(f"runs failed: {failed} (logs in {runner.state_dir(out) / 'logs'})")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray executor")
    args = parser.parse_args()
    cores = usable_cores()
    import offbench

    offbench.load("pendulum-scripted")  # generated once, outside the timings
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        spec = write_spec(folder, args.runs, args.steps)
        results["sequential"] = sequential(spec, folder / "sequential", cores)
        results["local"] = with_executor(spec, folder / "local", LocalExecutor())
        if not args.no_ray:
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            import ray

            from offbench.sweep.executors import RayExecutor

            begin = time.perf_counter()
            ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
            init = time.perf_counter() - begin
            results["ray"] = with_executor(spec, folder / "ray", RayExecutor())
            ray.shutdown()
    print_table(
        [
            {
                "executor": name,
                "wall s": f"{wall:.1f}",
                "runs/hour": f"{3600 * args.runs / wall:.0f}",
                "vs sequential": f"{results['sequential'] / wall:.2f}x",
            }
            for name, wall in results.items()
        ],
        f"{args.runs} BC runs x {args.steps} updates on pendulum-scripted, {cores} cores",
    )
    if "ray" in results:
        print(f"ray.init: {init:.1f} s; Ray overhead per run vs local: {(results['ray'] - results['local']) / args.runs:+.2f} s")


if __name__ == "__main__":
    main()
