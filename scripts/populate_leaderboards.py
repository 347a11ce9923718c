"""Run our own baselines for a benchmark and submit them: what fills `leaderboards/` in the repository.

    python scripts/populate_leaderboards.py pendulum-scripted            # every baseline x seed in [populate]
    python scripts/populate_leaderboards.py pendulum-scripted --baselines bc --seeds 0 1 2 --dry-run

For each dataset of the benchmark, each baseline and seed of its `[populate]` table, this runs

    offbench run baseline B --dataset D --seed S --out RUNS/<benchmark> --name B-<dataset>-s<S>
        --set eval_episodes=<protocol episodes> --set eval_every=<protocol every_steps> [--steps <protocol steps>]
        (the protocol as the benchmark pins it for that baseline: [evaluation.baseline.NAME] over [evaluation])
        [--set ...from [populate] set]

so the runs follow the benchmark's evaluation protocol, then submits each baseline's runs with
`offbench submit ... --benchmark <benchmark>` (which validates them and re-renders the tables).
It can be stopped and started again: a finished run directory is reused, an unfinished one is
continued with --resume. A baseline whose runs fail is reported and the others go on; the exit
status is 1 if anything failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from offbench.leaderboard.spec import load_spec  # noqa: E402
from offbench.leaderboard.entries import load_entries  # noqa: E402

# Protocol keys of benchmark.toml -> the trainer's config fields (offbench/training/config.py TrainConfig).
PROTOCOL_TO_CONFIG = {"episodes": "eval_episodes", "every_steps": "eval_every"}


def offbench(*args: str, dry_run: bool) -> int:
    command = [sys.executable, "-m", "offbench", *args]
    print("$ offbench " + " ".join(args), flush=True)
    if dry_run:
        return 0
    return subprocess.run(command).returncode


def run_one(spec, baseline: str, dataset: str, seed: int, runs: Path, extra: list[str], dry_run: bool) -> Path | None:
    name = f"{baseline}-{dataset.replace('/', '-')}-s{seed}"
    run_dir = runs / name
    if (run_dir / "summary.json").is_file():
        print(f"reusing finished run {run_dir}")
        return run_dir
    if (run_dir / "run.json").is_file():
        code = offbench("run", "baseline", baseline, "--resume", str(run_dir), dry_run=dry_run)
    else:
        args = ["run", "baseline", baseline, "--dataset", dataset, "--seed", str(seed), "--out", str(runs), "--name", name]
        protocol = spec.protocol_for(baseline)  # the benchmark's protocol with this baseline's own pins
        for key, field in PROTOCOL_TO_CONFIG.items():
            if key in protocol:
                args += ["--set", f"{field}={protocol[key]}"]
        if "steps" in protocol:
            args += ["--steps", str(protocol["steps"])]
        for override in extra:
            args += ["--set", override]
        code = offbench(*args, dry_run=dry_run)
    return run_dir if code == 0 else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benchmarks", nargs="+", help="benchmark names (folders of leaderboards/)")
    parser.add_argument("--baselines", nargs="*", help="override the benchmark's [populate] baselines")
    parser.add_argument("--seeds", nargs="*", type=int, help="override the benchmark's [populate] seeds")
    parser.add_argument("--runs", type=Path, default=Path("runs") / "leaderboards",
                        help="where run directories go (relative to the repository, so entries record portable paths)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args()
    os.chdir(REPO)

    failed: list[str] = []
    for benchmark in args.benchmarks:
        spec = load_spec(benchmark)
        baselines = args.baselines or spec.populate.get("baselines", [])
        seeds = args.seeds if args.seeds is not None else spec.populate.get("seeds", list(range(spec.min_seeds)))
        extra = list(spec.populate.get("set", []))
        if not baselines:
            print(f"{benchmark}: no [populate] baselines in {spec.path} and none given", file=sys.stderr)
            failed.append(benchmark)
            continue
        runs = args.runs / benchmark
        for baseline in baselines:
            done = [run_one(spec, baseline, dataset, seed, runs, extra, args.dry_run) for dataset in spec.datasets for seed in seeds]
            if any(d is None for d in done):
                failed.append(f"{benchmark}/{baseline} (training)")
                continue
            accepted = {run["run_id"] for _, entry in load_entries(spec) for run in entry["runs"]}
            if not args.dry_run and {json.loads((d / "run.json").read_text())["run_id"] for d in done} <= accepted:
                print(f"{benchmark}/{baseline}: already on the leaderboard")
                continue
            if offbench("submit", *map(str, done), "--benchmark", benchmark, dry_run=args.dry_run) != 0:
                failed.append(f"{benchmark}/{baseline} (submission)")
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
