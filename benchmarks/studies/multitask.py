"""How do the eight multi-task methods compare under one small, equal CPU budget, how fast do they train, and what
does evaluating a whole suite cost against the environments' own stepping time? Runs and tables (success per task
and mean, 3 seeds, behaviour policy beside them), training speed (updates/s per method) and evaluation cost.

    .venv/bin/python benchmarks/studies/multitask.py run   --datasets minigrid/mt3-near-optimal ... --seeds 0 1 2 --out DIR
    .venv/bin/python benchmarks/studies/multitask.py table --datasets ... --out DIR    # Markdown tables from the finished runs
    .venv/bin/python benchmarks/studies/multitask.py speed --dataset minigrid/mt3-near-optimal --seconds 8
    .venv/bin/python benchmarks/studies/multitask.py evaluation-cost --dataset minigrid/mt3-near-optimal --episodes 10

Answer: docs/results.md, "MiniGrid MT3 / MT5 / MT7" and "Meta-World MT10" (the leaderboard rows these runs made);
benchmarks/studies/multitask-minigrid.md, multitask-metaworld.md and multitask-speed.md (readings, speed and
evaluation cost).

`run` is resumable: a finished run (summary.json) is skipped, an interrupted one continues with --resume, so the
command can be killed and started again; a run another process is training (its directory locked) is skipped, so
two `run` commands can share one list (a second queue started in reverse order). Runs are plain `offbench run
baseline` subprocesses, niced, one torch thread each; `--jobs 2` runs two at once. The budget configs (CPU-sized
networks and step counts) are in benchmarks/studies/multitask/*-cpu.toml, layered over each baseline's standard
config for the dataset.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]  # the checkout
BUDGETS = Path(__file__).resolve().parent / "multitask"

# row label -> (baseline, --set overrides); the budget config is benchmarks/studies/multitask/<baseline>-cpu.toml
METHODS: dict[str, tuple[str, tuple[str, ...]]] = {
    "HarmoDT": ("harmodt", ()),
    "Prompt-DT": ("prompt-dt", ()),
    "MTDT": ("dt", ()),
    "MTBC": ("bc", ()),
    "MTBC+PCGrad": ("bc", ('gradient="pcgrad"',)),
    "MOORE-BC": ("moore-bc", ()),
    "MoE-BC": ("moore-bc", ("orthogonal=false",)),
    "MOORE-IQL": ("moore-iql", ()),
}
# variants run only when named (--methods): MTBC and the DT family acting by draws from their softmax, for the
# learning agents' data (minigrid/mt*-medium, -replay), a sampling PPO policy's, whose most likely action loops on
# most MiniGrid tasks (benchmarks/studies/minigrid-learned-data.md); HarmoDT at equal segments seen: 6,000 updates
# of 16 one-task segments are MTDT's and Prompt-DT's 1,500 of 64 mixed ones (96,000), its 30 mask updates kept
# (interval 200), evaluated at the same segment counts as theirs (every 2,000 updates = their 500)
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "MTBC-sampled": ("bc", ("eval_deterministic=false",)),
    "MTDT-sampled": ("dt", ("eval_deterministic=false",)),
    "Prompt-DT-sampled": ("prompt-dt", ("eval_deterministic=false",)),
    "HarmoDT-sampled": ("harmodt", ("eval_deterministic=false",)),
    "HarmoDT-6k": ("harmodt", ("steps=6000", "mask_interval=200", "eval_every=2000")),
}


def run_dir(out: Path, label: str, dataset: str, seed: int) -> Path:
    return out / label / dataset.replace("/", "-") / f"s{seed}"


def run_one(out: Path, label: str, dataset: str, seed: int) -> tuple[str, int, float]:
    """Start, resume or skip one run; returns (what, exit code, seconds)."""
    from offbench.errors import OffbenchError
    from offbench.tracking.run_dir import TrainingLock

    baseline, overrides = {**METHODS, **VARIANTS}[label]
    where = run_dir(out, label, dataset, seed)
    if (where / "summary.json").exists():
        return f"{label} {dataset} s{seed}: done", 0, 0.0
    command = [sys.executable, "-m", "offbench", "run", "baseline", baseline]
    if (where / "run.json").exists():
        try:  # another `run` over the same list may be training it: leave it to that one
            TrainingLock(where).release()
        except OffbenchError:
            return f"{label} {dataset} s{seed}: being trained by another process, skipped", 0, 0.0
        command += ["--resume", str(where)]
    else:
        where.parent.mkdir(parents=True, exist_ok=True)
        command += [
            "--dataset",
            dataset,
            "--seed",
            str(seed),
            "--config",
            str(BUDGETS / f"{baseline}-cpu.toml"),
            "--out",
            str(where.parent),
            "--name",
            where.name,
        ]
        for override in overrides:
            command += ["--set", override]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    with open(where.parent / f"{where.name}.log", "a") as log:
        code = subprocess.call(command, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=lambda: os.nice(5))
    return f"{label} {dataset} s{seed}", code, time.perf_counter() - start


def command_run(args: argparse.Namespace) -> None:
    jobs = [(label, dataset, seed) for dataset in args.datasets for label in args.methods for seed in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        for what, code, seconds in pool.map(lambda job: run_one(args.out, *job), jobs):
            print(f"{time.strftime('%H:%M:%S')} {what}: exit {code}, {seconds:.0f} s", flush=True)


# ---------------------------------------------------------------------------------------------- tables
def evaluations_by_step(where: Path) -> list[dict] | None:
    """A finished run's evaluations, one per step (the best target return's where DT-style runs try several)."""
    path = where / "evaluations.jsonl"
    if not (where / "summary.json").exists() or not path.exists():
        return None
    by_step: dict[int, dict] = {}
    for line in map(json.loads, path.read_text().splitlines()):
        if line["step"] not in by_step or line["success_rate"] > by_step[line["step"]]["success_rate"]:
            by_step[line["step"]] = line
    return [by_step[step] for step in sorted(by_step)]


def behaviour(dataset: str) -> dict[str, float]:
    """The behaviour policy's success rate per task, as the generated dataset records it (its card's `task_stats`)."""
    import offbench

    stats = (offbench.load(dataset).card or {}).get("task_stats", {})
    return {task: float(values["success_rate"]) for task, values in stats.items()}


def command_table(args: argparse.Namespace) -> None:
    for dataset in args.datasets:
        rows, tasks = {}, None
        for label in args.methods:
            runs = [evaluations_by_step(run_dir(args.out, label, dataset, seed)) for seed in args.seeds]
            runs = [r for r in runs if r]
            if not runs:
                continue
            tasks = list(runs[0][-1]["per_task"])
            per_task = np.array([[r[-1]["per_task"][t]["success_rate"] for t in tasks] for r in runs])  # (seeds, tasks), final
            best = np.array([max(line["success_rate"] for line in r) for r in runs])  # each seed's best evaluation
            rows[label] = (per_task, best, [r[-1]["step"] for r in runs])
        if not rows:
            continue
        reference = behaviour(dataset)
        short = [t.replace("MiniGrid-", "").replace("-v0", "").replace("-v3", "") for t in tasks]
        print(
            f"\n**{dataset}** (success rate, mean ± std over seeds: final checkpoint per task and mean; best = each "
            "seed's best evaluation during training, as HarmoDT's paper reports)\n"
        )
        print("| method | seeds | final step | final mean | best | " + " | ".join(short) + " |")
        print("|---|---|---|---|---|" + "---|" * len(tasks))
        if reference:
            values = [reference.get(t, float("nan")) for t in tasks]
            print(f"| behaviour policy | data | - | {np.mean(values):.2f} | - | " + " | ".join(f"{v:.2f}" for v in values) + " |")
        for label, (per_task, best, steps) in rows.items():
            means = per_task.mean(1)
            cells = " | ".join(f"{per_task[:, i].mean():.2f}" for i in range(len(tasks)))
            print(
                f"| {label} | {len(means)} | {min(steps)} | **{means.mean():.2f}** ± {means.std():.2f} | {best.mean():.2f} ± {best.std():.2f} | {cells} |"
            )


# ---------------------------------------------------------------------------------------------- speed
def budget_baseline(label: str, dataset: str, spec):
    """A fresh baseline of a method with its budget config for `dataset` (seeded), and the resolved config."""
    import torch

    from offbench.baselines import get_baseline
    from offbench.training.config import resolve_config

    name, overrides = {**METHODS, **VARIANTS}[label]
    cls = get_baseline(name)
    config = resolve_config(cls, dataset, BUDGETS / f"{name}-cpu.toml", list(overrides))
    torch.manual_seed(0)
    return cls(config.baseline, spec), config


def command_speed(args: argparse.Namespace) -> None:
    """Updates/s of every method's budget config on one dataset, one torch thread, in this process."""
    import torch

    import offbench
    from offbench.baselines.base import DatasetSpec
    from offbench.data.samplers import make_sampler

    torch.set_num_threads(1)
    store = offbench.load(args.dataset)
    spec = DatasetSpec.from_store(store)
    print(f"| method | batch | updates/s ({args.dataset}, 1 thread) |\n|---|---|---|")
    for label in args.methods:
        baseline, config = budget_baseline(label, args.dataset, spec)
        options = baseline.sampler_options() if hasattr(baseline, "sampler_options") else {}
        sampler = make_sampler(baseline.sampler, store, config.train.batch_size, 0, **options)
        for _ in range(5):
            baseline.update(sampler.sample())
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            baseline.update(sampler.sample())
            count += 1
        print(f"| {label} | {config.train.batch_size} | {count / (time.perf_counter() - start):.1f} |", flush=True)


def command_evaluation_cost(args: argparse.Namespace) -> None:
    """The multi-task protocol's evaluation of a whole suite (episodes batched across tasks, one policy call per
    step) against stepping the same environments, same seeds, with a fixed (zero) action and no network."""
    import torch

    import offbench
    from offbench.baselines.base import DatasetSpec
    from offbench.data.cards import get_card
    from offbench.evaluation.lanes import evaluate_tasks
    from offbench.evaluation.policy import PolicyOptions
    from offbench.utils import keep_freed_memory

    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as `offbench run` and `offbench evaluate` do
    card = get_card(args.dataset)
    store = offbench.load(args.dataset)
    spec = DatasetSpec.from_store(store)

    class FixedActions:  # the environments' own cost: no network, the same action every step
        def __init__(self, n: int):
            self.n = n

        def reset(self, num_envs: int) -> None:
            self.n = num_envs

        def act(self, observations: np.ndarray) -> np.ndarray:
            return np.zeros(self.n, np.int64) if spec.discrete else np.zeros((self.n, *spec.action_space.shape), np.float32)

        def observe(self, rewards, dones) -> None:
            pass

    def timed(policy_for) -> tuple[float, int]:
        start = time.perf_counter()
        episodes = evaluate_tasks(dict(card.env), policy_for, args.episodes, 0)
        return time.perf_counter() - start, int(episodes["length"].sum())

    fixed = lambda lanes, envs: FixedActions(len(lanes))  # noqa: E731
    timed(fixed)  # warm-up, untimed: imports, the suite's goal draws, compiled models (paid once per process)
    base_seconds, base_steps = timed(fixed)
    print("| policy | seconds | env steps | ratio to env stepping |\n|---|---|---|---|")
    print(f"| fixed action (environments only) | {base_seconds:.1f} | {base_steps} | 1.00 |")
    for label in args.methods:
        baseline, _ = budget_baseline(label, args.dataset, spec)
        if hasattr(baseline, "task_prompts"):  # a prompted policy keeps its tasks' prompts from the batches it sees
            from offbench.data.samplers import make_sampler

            sampler = make_sampler(baseline.sampler, store, 64, 0, **baseline.sampler_options())
            for _ in range(spec.num_tasks):
                baseline.keep_task_prompts(sampler.sample())
        target = float(store.episode_returns().max()) if getattr(baseline, "return_conditioned", False) else None

        def policy_for(lanes, envs, baseline=baseline, target=target):  # bound now: timed() calls it in this iteration
            return baseline.policy(PolicyOptions(task_ids=np.array([lane.task_id for lane in lanes]), target_return=target))

        seconds, steps = timed(policy_for)
        print(f"| {label} | {seconds:.1f} | {steps} | {seconds / base_seconds * base_steps / max(steps, 1):.2f} |", flush=True)
    again, _ = timed(fixed)  # the machine's load drifts: the environments alone once more, at the end
    print(f"| fixed action, again at the end | {again:.1f} | {base_steps} | {again / base_seconds:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "table"):
        p = sub.add_parser(name)
        p.add_argument("--datasets", nargs="+", required=True)
        p.add_argument("--methods", nargs="+", default=list(METHODS), choices=[*METHODS, *VARIANTS])
        p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--jobs", type=int, default=1)
    for name in ("speed", "evaluation-cost"):
        p = sub.add_parser(name)
        p.add_argument("--dataset", required=True)
        p.add_argument("--methods", nargs="+", default=list(METHODS), choices=[*METHODS, *VARIANTS])
        p.add_argument("--seconds", type=float, default=10.0)
        p.add_argument("--episodes", type=int, default=2)
        p.add_argument("--threads", type=int, default=1, help="torch threads (the policy's; the environments step on one)")
    args = parser.parse_args()
    {"run": command_run, "table": command_table, "speed": command_speed, "evaluation-cost": command_evaluation_cost}[args.command](args)


if __name__ == "__main__":
    main()
