"""Train a baseline on a dataset and track the run: the loop behind `offbench run baseline`.

    config -> seed everything -> sampler -> update ... (log, evaluate, checkpoint on a schedule) -> summary

Checks that can fail (config, action space, environment, run directory) all run before the first
update. The checkpoint (`checkpoints/last.pt`, tensors and plain values only, loaded with
weights_only=True) holds the networks and optimisers, the sampler's RNG, the python/numpy/torch RNG
states, the step, the loss accumulator and the byte offsets of the JSON Lines files, so a resumed
run continues exactly where the checkpoint left it: on CPU in deterministic mode it ends with the
same numbers as a run that was never interrupted.
"""

from __future__ import annotations

import io
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from offbench.baselines import get_baseline
from offbench.baselines.base import DatasetSpec
from offbench.data.cards import DatasetCard, card_from_dict, get_card
from offbench.data.store import EpisodeStore
from offbench.errors import OffbenchError
from offbench.evaluation.rollout import episode_seed, evaluation_record, run_episodes
from offbench.training.distributed import SingleProcess
from offbench.training.config import ResolvedConfig, config_from_dict, dataset_slug, resolve_config
from offbench.tracking import run_dir as rd
from offbench.tracking.loggers import LocalFiles, Logger, open_loggers, parse_logger_names
from offbench.utils import atomic_write_bytes, atomic_write_json


# ---------------------------------------------------------------------------------------------- data
@dataclass
class Dataset:
    id: str
    path: Path
    format: str
    store: EpisodeStore
    card: DatasetCard | None  # what evaluation rebuilds the environment and normalises scores from


def open_dataset(id_or_path: str | Path) -> Dataset:
    """A registered id (downloaded or generated on first use) or a path; a path's card is the one stored in
    the file, when it has one."""
    from offbench.data.resolve import locate

    found = locate(id_or_path)
    card = found.card
    if card is None and found.store.card:
        try:
            card = card_from_dict(found.store.card)
        except OffbenchError:
            card = None
    dataset_id = card.id if card else found.path.stem
    return Dataset(dataset_id, found.path.resolve(), found.format, found.store, card)


def check_fit(baseline_cls: type, spec: DatasetSpec, dataset: Dataset, evaluate: bool) -> None:
    """The dataset's action kind suits the baseline, and its environment can be built and matches the data."""
    kind = "discrete" if spec.discrete else "continuous"
    kinds = getattr(baseline_cls, "action_kinds", ("continuous", "discrete"))
    if kind not in kinds:
        raise OffbenchError(
            f"{dataset.id}: {kind} actions ({spec.action_space}), but baseline '{baseline_cls.name}' takes only {' or '.join(kinds)} actions"
        )
    if not evaluate:
        return
    if dataset.card is None or not dataset.card.env:
        raise OffbenchError(f"{dataset.path}: no dataset card with an [env] to evaluate in (use a registered id, or --set eval_episodes=0)")
    from offbench.envs.factory import make_env

    env = make_env(dataset.card.env)
    try:
        for what, env_space, data_space in (
            ("observation", env.observation_space, spec.observation_space),
            ("action", env.action_space, spec.action_space),
        ):
            if data_space is not None and env_space.shape != data_space.shape:
                raise OffbenchError(
                    f"{dataset.id}: the dataset's {what} shape {data_space.shape} differs from "
                    f"{dataset.card.env.get('id')}'s {env_space.shape}"
                )
    finally:
        env.close()


# ---------------------------------------------------------------------------------------------- seeds
def seed_everything(seed: int, device: torch.device) -> None:
    """Seed python, numpy and torch; deterministic kernels on CPU, where the same-numbers promise holds
    (on CUDA that would also need CUBLAS_WORKSPACE_CONFIG and slower kernels: not promised)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True)


def rng_states(device: torch.device) -> dict[str, Any]:
    numpy_state = np.random.get_state(legacy=False)
    states = {
        "python": random.getstate(),
        "numpy": {**numpy_state, "state": {"key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)), "pos": numpy_state["state"]["pos"]}},
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    numpy_state = dict(states["numpy"])
    numpy_state["state"] = {"key": states["numpy"]["state"]["key"].numpy().astype(np.uint32), "pos": states["numpy"]["state"]["pos"]}
    np.random.set_state(numpy_state)
    torch.set_rng_state(states["torch"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])


def resolve_device(name: str) -> torch.device:
    try:
        device = torch.device(name)
    except RuntimeError:
        raise OffbenchError(f"--device {name!r}: not a torch device (cpu, cuda, cuda:1, ...)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise OffbenchError(f"--device {name}: CUDA is not available on this machine")
    return device


# ---------------------------------------------------------------------------------------------- the run
@dataclass
class Run:
    run_dir: Path
    record: dict[str, Any]  # run.json
    baseline_cls: type
    config: ResolvedConfig
    dataset: Dataset
    spec: DatasetSpec
    device: torch.device
    loggers: list[str] = field(default_factory=list)
    parallel: SingleProcess = field(default_factory=SingleProcess)  # a DataParallel rank under torchrun

    @property
    def seed(self) -> int:
        return int(self.record["seed"])

    @property
    def target_returns(self) -> list[float | None]:
        return self.record["evaluation"]["target_returns"] or [None]

    def build_baseline(self):
        return self.baseline_cls(self.config.baseline, self.spec, self.device)

    def restore(self, baseline, checkpoint: dict[str, Any], sampler=None) -> None:
        """Load a checkpoint's states; one line naming the file where it does not fit this version's baseline
        (a checkpoint written by a version with another state layout)."""
        try:
            baseline.load_state_dict(checkpoint["baseline"])
            if sampler is not None:
                sampler.load_state_dict(checkpoint["sampler"])
        except (KeyError, RuntimeError, ValueError) as exc:
            written_at = (self.record.get("code") or {}).get("git_commit") or "an unknown commit"
            raise OffbenchError(
                f"{self.run_dir / rd.CHECKPOINT}: does not fit this version's {baseline.name} "
                f"({exc.__class__.__name__}: {str(exc).splitlines()[0][:160]}); it was written at {written_at}"
            ) from None

    def evaluate(self, baseline, step: int, episodes: int) -> list[dict[str, Any]]:
        from offbench.envs.factory import make_env

        seeds = [episode_seed(self.seed, i) for i in range(episodes)]
        records = []
        for target in self.target_returns:
            policy = baseline.policy() if target is None else baseline.policy(target_return=target)
            results = run_episodes(policy, lambda: make_env(self.dataset.card.env), seeds)
            records.append(evaluation_record(step, results, self.dataset.card, target))
        return records

    def train(self, checkpoint: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run (or continue) the training loop to the configured number of steps; returns the summary."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        from offbench.data.samplers import make_sampler

        train = self.config.train
        seed_everything(self.seed, self.device)
        baseline = self.build_baseline()
        sampler = make_sampler(
            baseline.sampler, self.dataset.store, train.batch_size, self.seed, device=str(self.device),
            **(baseline.sampler_options() if hasattr(baseline, "sampler_options") else {}),
        )
        sampler = self.parallel.prepare(baseline, sampler, self.seed)
        main = self.parallel.is_main  # the process that writes the run directory and evaluates
        start_step, elapsed, sums, count = 0, 0.0, {}, 0
        if checkpoint is not None:
            self.restore(baseline, checkpoint, sampler)
            restore_rng_states(self.parallel.own_rng(checkpoint["rng"]))
            start_step, elapsed = checkpoint["step"], checkpoint["time_s"]
            sums, count = dict(checkpoint["loss_sums"]), checkpoint["loss_count"]
        resumed = bool(self.record.get("resumes"))
        # a resumed run cuts its files back to the checkpoint (to nothing if it died before the first one)
        local = LocalFiles(self.run_dir, positions=(checkpoint["files"] if checkpoint else {}) if resumed else None) if main else None
        backends = open_loggers(self.loggers, self.run_dir, self.run_dir.name, self.config.as_dict(), start_step if resumed else None) if main else []
        all_loggers: list[Logger] = [local, *backends] if main else []
        evaluate = train.eval_episodes > 0 and main
        completed = False
        info = ""
        progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]:>8}"),
            TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
            console=Console(stderr=True), transient=False, disable=not main,
        )
        try:
            with progress:
                task = progress.add_task(f"{self.baseline_cls.name} {self.dataset.id}", total=train.steps, completed=start_step, rate="", info="")
                clock, last_rate_step = time.perf_counter(), start_step
                for step in range(start_step + 1, train.steps + 1):
                    losses = self.parallel.mean(baseline.update(sampler.sample()))
                    for key, value in losses.items():
                        sums[key] = sums.get(key, 0.0) + float(value)
                    count += 1
                    last = step == train.steps
                    if step % train.log_every == 0 or last:
                        now = time.perf_counter()
                        elapsed += now - clock
                        rate = (step - last_rate_step) / max(now - clock, 1e-9)
                        clock, last_rate_step = now, step
                        means = {key: value / count for key, value in sums.items()}
                        for logger in all_loggers:
                            logger.log_metrics(step, {"time_s": round(elapsed, 3), **means})
                        sums, count = {}, 0
                        info = " ".join(f"{k} {v:.4g}" for k, v in means.items() if k.endswith("loss"))
                        progress.update(task, rate=f"{rate:.0f} it/s")
                    if evaluate and (step % train.eval_every == 0 or last):
                        for record in self.evaluate(baseline, step, train.eval_episodes):
                            for logger in all_loggers:
                                logger.log_evaluation(record)
                            info = f"eval {record['mean_return']:.1f}" + (f" @ {record['target_return']:g}" if record["target_return"] is not None else "")
                    if step % train.checkpoint_every == 0 or last:
                        self.save_checkpoint(step, elapsed + time.perf_counter() - clock, baseline, sampler, sums, count, local)
                    progress.update(task, completed=step, info=info)
            summary = self.write_summary(elapsed) if main else {}
            completed = True
        finally:
            for logger in all_loggers:
                logger.close(completed)
        return summary

    def save_checkpoint(self, step, elapsed, baseline, sampler, sums, count, local: LocalFiles | None) -> None:
        rng = self.parallel.gather_rng(rng_states(self.device))  # every rank's, written by rank 0
        if local is None:
            return
        state = {
            "step": step,
            "time_s": elapsed,
            "baseline": baseline.state_dict(),
            "sampler": sampler.state_dict(),
            "rng": rng,
            "loss_sums": sums,
            "loss_count": count,
            "files": local.positions(),
        }
        buffer = io.BytesIO()
        torch.save(state, buffer)
        atomic_write_bytes(self.run_dir / rd.CHECKPOINT, buffer.getvalue())

    def write_summary(self, elapsed: float) -> dict[str, Any]:
        evaluations = rd.read_evaluations(self.run_dir)
        card = self.dataset.card
        metric = rd.score_metric(evaluations, card is not None and card.ref_min_score is not None and card.ref_max_score is not None)
        summary = {
            "status": "completed",
            "steps": self.config.train.steps,
            "wall_time_s": round(elapsed, 3),
            **rd.summarize(evaluations, self.target_returns[0], metric),
            "finished_at": rd.utc_now(),
        }
        atomic_write_json(self.run_dir / rd.SUMMARY_FILE, summary)
        return summary


def load_checkpoint(run_dir: Path, device: torch.device) -> dict[str, Any] | None:
    path = run_dir / rd.CHECKPOINT
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)  # RNG states must stay CPU tensors
    except Exception as exc:  # noqa: BLE001 - any unreadable checkpoint is the same user-facing problem
        raise OffbenchError(f"{path}: unreadable checkpoint ({exc.__class__.__name__}: {str(exc).splitlines()[0][:200]})") from None


# ---------------------------------------------------------------------------------------------- entry points
def default_run_name(baseline: str, dataset_id: str, seed: int) -> str:
    from datetime import datetime

    return f"{baseline}-{dataset_slug(dataset_id)}-s{seed}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def start_run(
    baseline_name: str,
    dataset: str,
    config_file: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    seed: int = 0,
    steps: int | None = None,
    device: str = "cpu",
    out: Path = Path("runs"),
    name: str | None = None,
    loggers: str | None = None,
) -> Run:
    """Check everything, create the run directory and run.json; `run.train()` then does the work."""
    if not 0 <= seed < 2**32:  # numpy's global seed and the evaluation episode seeds must be non-negative
        raise OffbenchError(f"--seed must be between 0 and 2**32 - 1, got {seed}")
    baseline_cls = get_baseline(baseline_name)
    logger_names = parse_logger_names(loggers)
    torch_device = resolve_device(device)
    data = open_dataset(dataset)
    config = resolve_config(baseline_cls, data.id, config_file, [*overrides, *([f"steps={steps}"] if steps is not None else [])])
    spec = DatasetSpec.from_store(data.store)
    check_fit(baseline_cls, spec, data, evaluate=config.train.eval_episodes > 0)
    targets = None
    if hasattr(config.baseline, "target_returns"):
        targets = [float(t) for t in config.baseline.target_returns] or [float(data.store.episode_returns().max())]
    run_dir = rd.create_run_dir(Path(out) / (name or default_run_name(baseline_name, data.id, seed)))
    record = {
        "run_id": run_dir.name,
        "baseline": baseline_name,
        "dataset": {"id": data.id, "path": str(data.path), "content_sha256": data.store.content_sha256(), "format": data.format},
        "seed": seed,
        "config": config.as_dict(),
        "config_sources": config.sources,
        "code": rd.code_version(),
        "env": rd.environment_info(str(torch_device)),
        "evaluation": {
            "episodes": config.train.eval_episodes,
            "every_steps": config.train.eval_every,
            "target_returns": targets,
            "env": dict(data.card.env) if data.card else None,
            "episode_seeds": "10000 + 1000 * seed + episode",
        },
        "loggers": logger_names,
        "started_at": rd.utc_now(),
    }
    rd.write_run_json(run_dir, record)
    return Run(run_dir, record, baseline_cls, config, data, spec, torch_device, logger_names)


def open_run(run_dir: Path, device: str | None = None) -> Run:
    """A run rebuilt from its run.json: the same baseline, config and dataset (checked by checksum)."""
    run_dir = Path(run_dir)
    record = rd.read_run_json(run_dir)
    baseline_cls = get_baseline(record["baseline"])
    config = config_from_dict(baseline_cls, record["config"])
    dataset_info = record["dataset"]
    try:  # a registered id brings its card (environment, reference scores); else the file as given
        get_card(dataset_info["id"])
        source = dataset_info["id"]
    except OffbenchError:
        source = dataset_info["path"]
    data = open_dataset(source)
    if data.store.content_sha256() != dataset_info["content_sha256"]:
        raise OffbenchError(f"{run_dir}: dataset {source} has changed since the run started (content checksum differs)")
    torch_device = resolve_device(device or record["env"]["device"])
    return Run(run_dir, record, baseline_cls, config, data, DatasetSpec.from_store(data.store), torch_device, list(record.get("loggers", [])))


def resume_run(run_dir: Path, device: str | None = None) -> tuple[Run, dict[str, Any] | None]:
    """Continue a run from `checkpoints/last.pt` (from the start if it died before its first checkpoint)."""
    run = open_run(run_dir, device)
    if (run.run_dir / rd.SUMMARY_FILE).exists():
        raise OffbenchError(f"{run_dir}: the run has already completed (summary.json exists); nothing to resume")
    checkpoint = load_checkpoint(run.run_dir, run.device)
    if checkpoint is not None:
        run.restore(run.build_baseline(), checkpoint)  # one that does not fit fails here, before run.json changes
    run.record.setdefault("resumes", []).append({"at": rd.utc_now(), "from_step": checkpoint["step"] if checkpoint else 0})
    rd.write_run_json(run.run_dir, {k: v for k, v in run.record.items() if k != "schema"})
    return run, checkpoint
