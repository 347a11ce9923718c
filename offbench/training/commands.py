"""`offbench run baseline ...` and `offbench evaluate RUN_DIR` (wired into offbench/cli.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from offbench.baselines import BASELINES
from offbench.errors import OffbenchError
from offbench.utils import keep_freed_memory

run_app = typer.Typer(help="Train a baseline and track the run.", no_args_is_help=True)
console = Console()


@dataclass(frozen=True)
class RunRequest:
    """What `offbench run baseline` was asked for: a new run of baseline `name` on `dataset`, or, with `resume`, the
    continuation of that run directory (which then brings its own settings)."""

    name: str
    dataset: str | None
    config: Path | None
    overrides: list[str]
    seed: int | None
    steps: int | None
    device: str | None
    out: Path
    run_name: str | None
    logger: str | None
    resume: Path | None

    def check(self, print_config: bool) -> None:
        """The options make sense together: --resume takes none of a new run's, a new run needs --dataset."""
        if print_config and self.resume is not None:
            raise OffbenchError(f"--print-config shows a new run's config; a resumed run's is in {self.resume}/run.json")
        if self.resume is not None:
            given = [
                flag
                for flag, value in (
                    ("--dataset", self.dataset),
                    ("--config", self.config),
                    ("--set", self.overrides),
                    ("--seed", self.seed),
                    ("--steps", self.steps),
                    ("--name", self.run_name),
                    ("--logger", self.logger),
                )
                if value
            ]
            if given:
                raise OffbenchError(f"--resume continues {self.resume} with its own settings; drop {', '.join(given)}")
        else:
            self.new_run_dataset()

    def new_run_dataset(self) -> str:
        """--dataset, which a new run needs."""
        if self.dataset is None:
            raise OffbenchError("--dataset is required (a dataset id or path)")
        return self.dataset

    def all_overrides(self) -> list[str]:
        """--set's overrides, then --steps as one more."""
        return [*self.overrides, *([f"steps={self.steps}"] if self.steps is not None else [])]

    def command_line(self) -> list[str]:
        """The `run baseline` arguments back from their values (for the relaunch under torchrun)."""
        args = [self.name]
        if self.resume is not None:
            args += ["--resume", str(self.resume)]
        options = {
            "dataset": self.dataset,
            "config": self.config,
            "seed": self.seed,
            "steps": self.steps,
            "device": self.device,
            "out": self.out if self.resume is None else None,
            "name": self.run_name,
            "logger": self.logger,
        }
        args += [part for key, value in options.items() if value is not None for part in (f"--{key}", str(value))]
        return args + [part for override in self.overrides for part in ("--set", override)]


@run_app.command("baseline")
def run_baseline(
    name: str = typer.Argument(..., help=f"Baseline: {', '.join(BASELINES)}, or one a plugin registers (docs/plugins.md)."),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="Dataset id or path."),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML file overriding the standard config."),
    overrides: list[str] = typer.Option([], "--set", help="key=value overriding one config field (repeatable)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed for everything in training (default 0)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Number of updates (same as --set steps=N)."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu (default) or cuda."),
    out: Path = typer.Option(Path("runs"), "--out", help="Folder that holds run directories."),
    run_name: Optional[str] = typer.Option(None, "--name", help="Run directory name (default <baseline>-<dataset>-s<seed>-<time>)."),
    logger: Optional[str] = typer.Option(None, "--logger", help="Extra back-ends, comma-separated: tensorboard,wandb,mlflow."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue this run directory from its last checkpoint."),
    nproc: int = typer.Option(1, "--nproc", min=1, help="Data-parallel processes on this machine (torchrun; gloo on CPU, NCCL on CUDA)."),
    print_config: bool = typer.Option(
        False,
        "--print-config",
        help="Print the resolved config (TOML, usable as --config) with "
        "the files and overrides it came from, and exit: nothing is trained or written.",
    ),
) -> None:
    """Train a baseline on a dataset, evaluate it on a schedule and track the run."""
    from offbench.training import distributed

    request = RunRequest(name, dataset, config, overrides, seed, steps, device, out, run_name, logger, resume)
    request.check(print_config)
    if print_config:
        _print_config(request)
        return
    launch = distributed.launched()
    processes = launch.world_size if launch else nproc
    _check_processes(request, launch, nproc, processes)
    if launch is None and nproc > 1:
        raise typer.Exit(distributed.relaunch(nproc, ["run", "baseline", *request.command_line()]))
    run, checkpoint = _open(request) if launch is None else _open_rank(launch, request)
    if run.parallel.is_main:
        console.print(f"run directory: {run.run_dir}", highlight=False)
    keep_freed_memory()
    try:
        summary = run.train(checkpoint)
        run.parallel.barrier()  # rank 0 still evaluates: a rank that left the group before it aborted gloo at exit (SIGABRT)
    except KeyboardInterrupt:
        if run.parallel.is_main:
            console.print(
                f"interrupted; continue with: offbench run baseline {name} --resume {run.run_dir}"
                + (f" --nproc {processes}" if processes > 1 else ""),
                highlight=False,
            )
        raise typer.Exit(130) from None
    finally:
        if launch is not None:
            distributed.leave()
    if not run.parallel.is_main:
        return
    final = summary["final"]
    if final is not None:
        metric = summary["score_metric"]
        console.print(f"final {metric}: {final[metric]:.4g} (step {final['step']})", highlight=False)


def _print_config(request: RunRequest) -> None:
    """The layers start_run applies, as TOML with its sources, without opening (fetching, generating) a registered dataset."""
    import tomli_w

    from offbench.baselines import get_baseline
    from offbench.data.cards import get_card
    from offbench.data.resolve import open_dataset
    from offbench.training.config import resolve_config

    baseline_cls = get_baseline(request.name)
    dataset = request.new_run_dataset()
    dataset_id = open_dataset(dataset).id if Path(dataset).exists() else get_card(dataset).id
    resolved = resolve_config(baseline_cls, dataset_id, request.config, request.all_overrides())
    values = resolved.as_dict()
    lines = [
        f"# offbench run baseline {request.name} --dataset {dataset_id} (seed {request.seed or 0}): the resolved config",
        "# sources, later ones overriding earlier ones:",
        *(f"#   {source}" for source in resolved.sources),
        *(f"# {key} is unset (None)" for key, value in values.items() if value is None),
    ]
    print("\n".join(lines) + "\n" + tomli_w.dumps({key: value for key, value in values.items() if value is not None}), end="")


def _check_processes(request: RunRequest, launch, nproc: int, processes: int) -> None:
    """--nproc agrees with torchrun, with the process count a resumed run was trained with, and with the batch size
    (which splits evenly between the processes): checked before any process starts."""
    if launch is not None and nproc not in (1, launch.world_size):
        raise OffbenchError(f"--nproc {nproc}: this command runs under torchrun with {launch.world_size} processes")
    if request.resume is not None:
        from offbench.tracking.read_run import read_run_json

        trained_with = read_run_json(request.resume).get("distributed", {}).get("world_size", 1)
        if trained_with != processes:
            raise OffbenchError(f"{request.resume}: trained with {trained_with} process(es); resume it with --nproc {trained_with}")
    if launch is None and nproc > 1:
        _check_divisible(request, nproc)


def _check_divisible(request: RunRequest, nproc: int) -> None:
    """The global batch splits evenly between the processes."""
    if request.resume is not None:
        from offbench.tracking.read_run import read_run_json

        batch_size = read_run_json(request.resume)["config"]["batch_size"]
    else:
        from offbench.baselines import get_baseline
        from offbench.training.config import resolve_config

        batch_size = resolve_config(get_baseline(request.name), request.dataset, request.config, request.all_overrides()).train.batch_size
    if batch_size % nproc:
        raise OffbenchError(
            f"--nproc {nproc}: batch_size {batch_size} must be divisible by the {nproc} processes (each trains on an equal shard)"
        )


def _open(request: RunRequest, device: str | None = None):
    """(run, checkpoint): a new run, or the one at `resume` continued from its last checkpoint; on `device` when
    given (a torchrun rank's), else the requested one."""
    from offbench.training.trainer import resume_run, start_run

    device = device or request.device
    if request.resume is not None:
        return resume_run(request.resume, device, baseline=request.name)
    return start_run(
        request.name,
        request.new_run_dataset(),
        request.config,
        request.overrides,
        seed=request.seed or 0,
        steps=request.steps,
        device=device or "cpu",
        out=request.out,
        name=request.run_name,
        loggers=request.logger,
    ), None


def _open_rank(launch, request: RunRequest):
    """Under torchrun: rank 0 starts (or resumes) the run and records the process count; the other ranks open
    the run directory it made, read-only, once it is there."""
    from offbench.tracking import run_dir as rd
    from offbench.training import distributed
    from offbench.training.trainer import load_checkpoint, open_run

    parallel, device = distributed.join(launch, request.device or "cpu")
    if parallel.is_main:
        try:
            run, checkpoint = _open(request, device)
        except BaseException:
            parallel.share(None)  # the others stop quietly; this rank reports the error
            raise
        if request.resume is None:
            run.record["distributed"] = {"world_size": launch.world_size, "backend": "nccl" if device.startswith("cuda") else "gloo"}
            rd.write_run_json(run.run_dir, {k: v for k, v in run.record.items() if k != "schema"})
        parallel.share(str(run.run_dir))
    else:
        shared = parallel.share(None)
        if shared is None:
            distributed.leave()
            raise typer.Exit(1)
        run = open_run(Path(shared), device)
        checkpoint = load_checkpoint(run.run_dir, run.device) if request.resume is not None else None
    run.parallel = parallel
    return run, checkpoint


def evaluate_command(
    run_dir: Path = typer.Argument(..., help="A run directory."),
    episodes: Optional[int] = typer.Option(
        None, "--episodes", help="Episodes (per task; in context: consecutive episodes) (default: the run's)."
    ),
    tasks: Optional[str] = typer.Option(
        None, "--tasks", help="In-context runs: held-out (default, what boards report), validation (choose variants here) or train tasks."
    ),
    device: Optional[str] = typer.Option(None, "--device", help="Device to evaluate on (default: the run's)."),
    actions: Optional[str] = typer.Option(None, "--actions", help="greedy or sampled actions (default: the run's eval_deterministic)."),
) -> None:
    """Re-evaluate a run's last checkpoint under the run's own protocol (same seeds as in training); prints, writes nothing."""
    from offbench.evaluation.protocols import build_protocol, with_overrides
    from offbench.training.config import MAX_EVAL_EPISODES
    from offbench.training.trainer import check_action_mode, check_fit, load_checkpoint, open_run

    if episodes is not None and not 1 <= episodes <= MAX_EVAL_EPISODES:
        raise OffbenchError(f"--episodes must be between 1 and {MAX_EVAL_EPISODES}, got {episodes}")
    run = open_run(run_dir, device)
    checkpoint = load_checkpoint(run.run_dir, run.device)
    if checkpoint is None:
        raise OffbenchError(f"{run_dir}: no checkpoint yet (checkpoints/last.pt)")
    if episodes is None and run.config.train.eval_episodes < 1:
        raise OffbenchError(f"{run_dir}: the run evaluates no episodes (eval_episodes = 0); give --episodes")
    setup = with_overrides(run.setup, episodes, tasks, actions)
    protocol = build_protocol(setup)
    check_fit(run.baseline_cls, run.spec, run.dataset, protocol, evaluate=True)
    baseline = run.restored_baseline(checkpoint)
    check_action_mode(baseline, setup)
    keep_freed_memory()
    for record in protocol.evaluate(baseline, checkpoint["step"]):
        console.print(evaluation_table(record))


def evaluation_table(record: dict) -> Table:
    """One evaluation as a table: the headline row, then a row per task (multi-task) or the in-context curve."""
    import numpy as np

    def number(value, digits=2):
        return "-" if value is None else f"{value:.{digits}f}"

    table = Table(
        box=None,
        header_style="bold",
        title=f"step {record['step']}"
        + (f", target return {record['target_return']:g}" if isinstance(record.get("target_return"), (int, float)) else ""),
    )
    for column in ("", "episodes", "mean return", "std", "normalized score", "success rate"):
        table.add_column(column, justify="right")
    returns = record["returns"]
    table.add_row(
        "all",
        str(len(returns)),
        number(record["mean_return"]),
        number(float(np.std(returns))),
        number(record["normalized_score"]),
        number(record["success_rate"]),
    )
    for name, task in (record.get("per_task") or {}).items():
        table.add_row(
            name,
            str(len(task["returns"])),
            number(task["mean_return"]),
            number(float(np.std(task["returns"]))),
            "-",
            number(task["success_rate"]),
        )
    curve = record.get("in_context_returns")
    if curve:
        known = record.get("optimal_return") is not None  # XLand rulesets: no known optimum, so no regret
        table.caption = f"in context ({record['tasks']} tasks): episode 1 {curve[0]:.2f}, last {curve[-1]:.2f}, " + (
            f"optimal {record['optimal_return']:.2f}, cumulative regret {record['regret']:.2f}"
            if known
            else "optimal return unknown (no regret)"
        )
    return table
