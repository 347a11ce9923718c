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

from offbench.baselines import baseline_names, baseline_origin, get_baseline
from offbench.baselines.base import micro_batch_refusal
from offbench.data.cards import DatasetCard, all_cards, get_card
from offbench.data.resolve import Dataset, open_dataset
from offbench.data.spec import DatasetSpec
from offbench.data.store import EpisodeStore
from offbench.errors import OffbenchError
from offbench.evaluation.policy import PolicyOptions
from offbench.evaluation.protocols import EvaluationProtocol, EvaluationSetup, build_protocol, protocol_name
from offbench.records import to_dict
from offbench.tracking import run_dir as rd
from offbench.tracking.loggers import LocalFiles, Logger, open_loggers, parse_logger_names
from offbench.tracking.read_run import read_evaluations, read_run_json
from offbench.tracking.run_files import CHECKPOINT, SUMMARY_FILE, MethodRecord
from offbench.training.config import ResolvedConfig, config_from_dict, dataset_slug, resolve_config
from offbench.training.distributed import SingleProcess
from offbench.training.memory import auto_micro_batch, check_update_memory
from offbench.utils import atomic_write_bytes, safe_component


def check_action_mode(baseline, setup: EvaluationSetup) -> None:
    """A baseline that cannot sample actions says so (one line) before any run directory or episode exists. The probe
    policy gets what any policy may require (a target return, a task id per row); it is built, never played."""
    if not setup.deterministic:
        target = setup.target_returns[0] if setup.target_returns[0] is not None else (setup.task_target_returns or (0.0,))[0]
        baseline.policy(PolicyOptions(deterministic=False, target_return=target, task_ids=np.zeros(1, dtype=np.int64)))


def check_fit(baseline_cls: type, spec: DatasetSpec, dataset: Dataset, protocol: EvaluationProtocol, evaluate: bool) -> None:
    """The dataset's action kind and evaluation protocol suit the baseline, and (when it evaluates) the protocol's
    environment builds and matches the data."""
    kind = "discrete" if spec.discrete else "continuous"
    if kind not in baseline_cls.action_kinds:
        raise OffbenchError(
            f"{dataset.id}: {kind} actions ({spec.action_space}), but baseline '{baseline_cls.name}' takes only {' or '.join(baseline_cls.action_kinds)} actions"
        )
    check_protocol_support(baseline_cls, dataset.card, dataset.id)
    if evaluate:
        protocol.check(spec, baseline_cls)


def baseline_sampler(baseline, store, batch_size: int, seed: int, device: str = "cpu"):
    """The sampler the baseline trains from; building it checks the data has what the sampler reads."""
    from offbench.data.samplers import make_sampler

    options = baseline.sampler_options() if hasattr(baseline, "sampler_options") else {}
    return make_sampler(baseline.sampler, store, batch_size, seed, device=device, **options)


def check_micro_batch(baseline_cls: type, config: ResolvedConfig) -> None:
    """A micro_batch smaller than the batch only for a baseline whose micro-batches add up to the whole batch's gradient."""
    micro_batch = config.train.micro_batch
    if isinstance(micro_batch, int) and micro_batch < config.train.batch_size:
        refusal = micro_batch_refusal(baseline_cls, config.baseline)
        if refusal is not None:
            raise OffbenchError(
                f"config: micro_batch = {micro_batch}: {baseline_cls.name} cannot take its gradient in micro-batches: {refusal}"
            )


def check_data_parallel(baseline_cls: type, baseline_config: Any) -> None:
    """Under --nproc N each process takes the gradient of its shard of the batch and the shards' gradients are
    averaged: only the whole batch's gradient where no term couples the rows (T2MIR's contrastive pairs, PCGrad)."""
    from offbench.training.distributed import launched

    launch, coupling = launched(), getattr(baseline_cls, "batch_coupling", None)
    if launch is None or coupling is None:
        return
    refusal = coupling(baseline_config)
    if refusal is not None:
        raise OffbenchError(
            f"config: --nproc {launch.world_size} averages the gradients of each process's share of the batch, "
            f"which {baseline_cls.name} cannot take apart: {refusal}"
        )


def check_protocol_support(baseline_cls: type, card: DatasetCard | None, dataset_id: str) -> None:
    """The baseline has a mode for the protocol the card's kind calls for, and an in-context card's environment
    package is installed (checked from the card alone, so a registered dataset is refused before it is
    downloaded or generated)."""
    wanted = protocol_name(card)
    if wanted not in baseline_cls.evaluation_protocols:
        having = [name for name in baseline_names() if wanted in get_baseline(name).evaluation_protocols]
        kind = card.kind if card is not None else "offline"
        raise OffbenchError(
            f"{dataset_id}: a {kind} dataset is evaluated {wanted}, and baseline '{baseline_cls.name}' has no "
            f"{wanted} mode (baselines that have one: {', '.join(having) or 'none yet'})"
        )
    if wanted == "in-context" and card is not None and card.env:  # its split and evaluation need the suite's package
        from offbench.envs.factory import require_suite

        require_suite(dict(card.env))


def evaluation_setup(baseline_cls: type, config: ResolvedConfig, data: Dataset, seed: int) -> EvaluationSetup:
    """The evaluation settings of a new run. Return-conditioned baselines are evaluated once per target return of
    their config; without one, at the best episode return in the data (per task on multi-task data)."""
    targets: tuple[float | None, ...] = (None,)
    task_targets = None
    if baseline_cls.return_conditioned:
        given = tuple(float(t) for t in config.baseline.target_returns)
        store = data.store
        if given:
            targets = given
        elif not isinstance(store, EpisodeStore):
            raise OffbenchError(
                f"{data.id}: read in place, this dataset has no episode returns to take a target return from; "
                "give the baseline's target_returns"
            )
        elif protocol_name(data.card) == "multi-task":
            task_targets = tuple(float(r) for r in best_return_per_task(store))
        else:
            targets = (float(store.episode_returns().max()),)
    train = config.train
    return EvaluationSetup(
        card=data.card,
        seed=seed,
        episodes=train.eval_episodes,
        every_steps=train.eval_every,
        target_returns=targets,
        task_target_returns=task_targets,
        deterministic=train.eval_deterministic,
        tasks=train.eval_tasks,
    )


def best_return_per_task(store: EpisodeStore) -> np.ndarray:
    """The best episode return of each task id in a multi-task store (task ids 0..num_tasks-1)."""
    returns = store.episode_returns()
    task_of_episode = np.asarray(store.columns["task_id"])[store.episode_starts[:-1]]
    best = np.full(int(task_of_episode.max()) + 1, -np.inf)
    np.maximum.at(best, task_of_episode, returns)
    return best


def setup_from_record(record: dict[str, Any], card: DatasetCard | None) -> EvaluationSetup:
    """A run's evaluation settings as its run.json recorded them."""
    evaluation = record["evaluation"]
    targets = evaluation.get("target_returns")
    task_targets = evaluation.get("task_target_returns")
    return EvaluationSetup(
        card=card,
        seed=int(record["seed"]),
        episodes=int(evaluation["episodes"]),
        every_steps=int(evaluation["every_steps"]),
        target_returns=tuple(float(t) for t in targets) if targets else (None,),
        task_target_returns=tuple(float(t) for t in task_targets) if task_targets else None,
        deterministic=bool(evaluation.get("deterministic", True)),
        tasks=evaluation.get("tasks") if isinstance(evaluation.get("tasks"), str) else "held-out",
    )


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
        "numpy": {
            **numpy_state,
            "state": {"key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)), "pos": numpy_state["state"]["pos"]},
        },
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
class LoopState:
    """What the training loop carries between updates and saves in a checkpoint besides the networks."""

    step: int = 0
    elapsed: float = 0.0  # seconds of training so far, resumes included
    loss_sums: dict[str, float] = field(default_factory=dict)  # the metrics line in progress
    loss_count: int = 0


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
    sampler: Any = None  # a new run's sampler, built by start_run to check the data; train() uses it instead of a second one
    lock: rd.TrainingLock | None = None  # held from start_run / resume_run until train() returns

    @property
    def seed(self) -> int:
        return int(self.record["seed"])

    @property
    def setup(self) -> EvaluationSetup:
        return setup_from_record(self.record, self.dataset.card)

    def protocol(self) -> EvaluationProtocol:
        """The run's evaluation protocol."""
        return build_protocol(self.setup)

    def build_baseline(self):
        """The baseline of the run's config, with what the run sets on it: the micro-batch its updates split their
        batch into, and the seed its policies sample with (baselines that have them)."""
        baseline = self.baseline_cls(self.config.baseline, self.spec, self.device)
        if self.config.train.micro_batch is not None:
            baseline.micro_batch = self.config.train.micro_batch
        if hasattr(baseline, "evaluation_seed"):
            baseline.evaluation_seed = self.seed
        return baseline

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
                f"{self.run_dir / CHECKPOINT}: does not fit this version's {baseline.name} "
                f"({exc.__class__.__name__}: {str(exc).splitlines()[0][:160]}); it was written at {written_at}"
            ) from None

    def restored_baseline(self, checkpoint: dict[str, Any]):
        """The baseline with the checkpoint's weights (the same checks `--resume` makes)."""
        baseline = self.build_baseline()
        self.restore(baseline, checkpoint)
        return baseline

    def train(self, checkpoint: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run (or continue) the training loop to the configured number of steps; returns the summary."""
        seed_everything(self.seed, self.device)
        baseline = self.build_baseline()
        sampler, self.sampler = self.sampler, None
        if sampler is None:
            sampler = baseline_sampler(baseline, self.dataset.store, self.config.train.batch_size, self.seed, str(self.device))
        sampler = self.parallel.prepare(baseline, sampler, self.seed)
        main = self.parallel.is_main  # the process that writes the run directory and evaluates
        state = LoopState()
        if checkpoint is not None:
            self.restore(baseline, checkpoint, sampler)
            restore_rng_states(self.parallel.own_rng(checkpoint["rng"]))
            state = LoopState(checkpoint["step"], checkpoint["time_s"], dict(checkpoint["loss_sums"]), checkpoint["loss_count"])
        resumed = bool(self.record.get("resumes"))
        # a resumed run cuts its files back to the checkpoint (to nothing if it died before the first one)
        local = LocalFiles(self.run_dir, positions=(checkpoint["files"] if checkpoint else {}) if resumed else None) if main else None
        backends = (
            open_loggers(self.loggers, self.run_dir, self.run_dir.name, self.config.as_dict(), state.step if resumed else None)
            if main
            else []
        )
        all_loggers: list[Logger] = [local, *backends] if local is not None else []
        completed = False
        try:
            self._loop(baseline, sampler, state, local, all_loggers)
            summary = self.write_summary(state.elapsed) if main else {}
            completed = True
        finally:
            for logger in all_loggers:
                logger.close(completed)
            if self.lock is not None:
                self.lock.release()
        return summary

    def _loop(self, baseline, sampler, state: LoopState, local: LocalFiles | None, loggers: list[Logger]) -> None:
        """Update, log, evaluate and checkpoint on the config's schedule, from `state.step` to the last step."""
        from offbench.utils import progress_bar

        train = self.config.train
        protocol = self.protocol() if train.eval_episodes > 0 and self.parallel.is_main else None
        info = ""
        label = f"{self.baseline_cls.name} {self.dataset.id}"
        with progress_bar(
            not self.parallel.is_main, label, train.steps, unit="updates", completed=state.step, fields=("rate", "info")
        ) as advance:
            clock, last_rate_step = time.perf_counter(), state.step
            for step in range(state.step + 1, train.steps + 1):
                for key, value in self.parallel.mean(baseline.update(sampler.sample())).items():
                    state.loss_sums[key] = state.loss_sums.get(key, 0.0) + float(value)
                state.loss_count += 1
                state.step = step
                last = step == train.steps
                if step % train.log_every == 0 or last:
                    now = time.perf_counter()
                    state.elapsed += now - clock
                    rate = (step - last_rate_step) / max(now - clock, 1e-9)
                    clock, last_rate_step = now, step
                    info = self._log_losses(state, loggers)
                    advance(0, rate=f"{rate:.0f} it/s")
                if protocol is not None and (step % train.eval_every == 0 or last):
                    info = self._log_evaluations(protocol.evaluate(baseline, step), loggers) or info
                if step % train.checkpoint_every == 0 or last:
                    self.save_checkpoint(state, state.elapsed + time.perf_counter() - clock, baseline, sampler, local)
                advance(1, info=info)

    @staticmethod
    def _log_losses(state: LoopState, loggers: list[Logger]) -> str:
        """One metrics line (each loss's mean since the last line); the progress bar's text."""
        means = {key: value / state.loss_count for key, value in state.loss_sums.items()}
        for logger in loggers:
            logger.log_metrics(state.step, {"time_s": round(state.elapsed, 3), **means})
        state.loss_sums, state.loss_count = {}, 0
        return " ".join(f"{k} {v:.4g}" for k, v in means.items() if k.endswith("loss"))

    @staticmethod
    def _log_evaluations(records: list[dict[str, Any]], loggers: list[Logger]) -> str:
        for record in records:
            for logger in loggers:
                logger.log_evaluation(record)
        if not records:
            return ""
        last = records[-1]
        return f"eval {last['mean_return']:.1f}" + (
            f" @ {last['target_return']:g}" if isinstance(last["target_return"], (int, float)) else ""
        )

    def save_checkpoint(self, state: LoopState, elapsed: float, baseline, sampler, local: LocalFiles | None) -> None:
        rng = self.parallel.gather_rng(rng_states(self.device))  # every rank's, written by rank 0
        if local is None:
            return
        checkpoint = {
            "step": state.step,
            "time_s": elapsed,
            "baseline": baseline.state_dict(),
            "sampler": sampler.state_dict(),
            "rng": rng,
            "loss_sums": state.loss_sums,
            "loss_count": state.loss_count,
            "files": local.positions(),
        }
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write_bytes(self.run_dir / CHECKPOINT, buffer.getvalue())

    def write_summary(self, elapsed: float) -> dict[str, Any]:
        evaluations = read_evaluations(self.run_dir)
        metric = self.protocol().score_metric(evaluations) if evaluations else "mean_return"
        return to_dict(rd.write_summary(self.run_dir, self.config.train.steps, elapsed, self.setup.target_returns[0], metric))


def load_checkpoint(run_dir: Path, device: torch.device) -> dict[str, Any] | None:
    path = run_dir / CHECKPOINT
    if not path.exists():
        return None
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)  # RNG states must stay CPU tensors
    except Exception as exc:  # noqa: BLE001 - any unreadable checkpoint is the same user-facing problem
        raise OffbenchError(f"{path}: unreadable checkpoint ({exc.__class__.__name__}: {str(exc).splitlines()[0][:200]})") from None
    if not isinstance(checkpoint, dict):
        raise OffbenchError(f"{path}: not a checkpoint (holds a {type(checkpoint).__name__}, not the trainer's dict)")
    step = checkpoint.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise OffbenchError(f"{path}: field 'step' must be a non-negative integer, got {step!r:.80}")
    for key, kinds in CHECKPOINT_FIELDS.items():
        value = checkpoint.get(key)
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise OffbenchError(f"{path}: field '{key}' is missing or not {' or '.join(k.__name__ for k in kinds)}")
    return checkpoint


CHECKPOINT_FIELDS = {
    "baseline": (dict,),
    "sampler": (dict,),
    "rng": (dict,),
    "loss_sums": (dict,),
    "files": (dict,),
    "loss_count": (int,),
    "time_s": (int, float),
}  # besides `step`


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
    if name is not None:
        safe_component(name, "--name")
    baseline_cls = get_baseline(baseline_name)
    logger_names = parse_logger_names(loggers)
    torch_device = resolve_device(device)
    if isinstance(dataset, str) and dataset in all_cards():
        check_protocol_support(baseline_cls, get_card(dataset), dataset)
    data = open_dataset(dataset)
    config = resolve_config(baseline_cls, data.id, config_file, [*overrides, *([f"steps={steps}"] if steps is not None else [])])
    spec = DatasetSpec.from_store(data.store)
    setup = evaluation_setup(baseline_cls, config, data, seed)
    protocol = build_protocol(setup)
    check_fit(baseline_cls, spec, data, protocol, evaluate=config.train.eval_episodes > 0)
    try:  # fields that disagree with each other (DT's embedding_dim % num_heads) fail here, before anything is written
        probe = baseline_cls(config.baseline, spec, torch.device("cpu"))
    except ValueError as exc:
        raise OffbenchError(f"config for {baseline_name}: {exc}") from None
    if config.train.eval_episodes > 0:
        check_action_mode(probe, setup)
    # data the baseline's sampler cannot use (DPT without optimal-action labels) is refused before the run dir exists
    sampler = baseline_sampler(probe, data.store, config.train.batch_size, seed, str(torch_device))
    check_micro_batch(baseline_cls, config)
    check_data_parallel(baseline_cls, config.baseline)
    if config.train.micro_batch == "auto":  # run.json records the micro-batch chosen
        config.train.micro_batch = auto_micro_batch(baseline_cls, config, spec, torch_device)
    check_update_memory(baseline_cls, config, spec, torch_device, data.id)  # an update that cannot fit: one line, nothing written
    run_dir = rd.create_run_dir(Path(out) / (name or default_run_name(baseline_name, data.id, seed)))
    lock = rd.TrainingLock(run_dir)
    record = rd.new_run_record(
        run_dir,
        baseline=baseline_name,
        method=MethodRecord(**baseline_origin(baseline_name)),
        dataset=data,
        seed=seed,
        config=config.as_dict(),
        config_sources=config.sources,
        device=str(torch_device),
        evaluation=protocol.describe(),
        loggers=logger_names,
    )
    rd.write_run_json(run_dir, record)
    return Run(run_dir, to_dict(record), baseline_cls, config, data, spec, torch_device, logger_names, sampler=sampler, lock=lock)


def open_run(run_dir: Path, device: str | None = None) -> Run:
    """A run rebuilt from its run.json: the same baseline, config and dataset (checked by checksum)."""
    run_dir = Path(run_dir)
    record = read_run_json(run_dir)
    method = record.get("method")
    kind = method.get("kind", "built-in") if isinstance(method, dict) else "built-in"
    if kind not in ("built-in", "plugin"):
        raise OffbenchError(
            f"{run_dir}: a {kind} run of '{record['baseline']}' (offbench.track / offbench.evaluate): only its own code "
            "can continue or re-evaluate it; `offbench submit --verify` replays own-code runs checkpointed with load=..."
        )
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
    return Run(
        run_dir, record, baseline_cls, config, data, DatasetSpec.from_store(data.store), torch_device, list(record.get("loggers", []))
    )


def resume_run(run_dir: Path, device: str | None = None, baseline: str | None = None) -> tuple[Run, dict[str, Any] | None]:
    """Continue a run from `checkpoints/last.pt` (from the start if it died before its first checkpoint). Every
    check (the baseline asked for, the checkpoint's fields and fit) runs before run.json records the resume."""
    run = open_run(run_dir, device)
    if baseline is not None and run.record["baseline"] != baseline:
        raise OffbenchError(f"{run_dir}: is a '{run.record['baseline']}' run, not '{baseline}'")
    run.lock = rd.TrainingLock(run.run_dir)  # before anything is checked or written
    try:
        if (run.run_dir / SUMMARY_FILE).exists():
            raise OffbenchError(f"{run_dir}: the run has already completed (summary.json exists); nothing to resume")
        checkpoint = load_checkpoint(run.run_dir, run.device)
        if checkpoint is not None:
            run.restored_baseline(checkpoint)  # one that does not fit fails here, before run.json changes
        run.record.setdefault("resumes", []).append({"at": rd.utc_now(), "from_step": checkpoint["step"] if checkpoint else 0})
        rd.write_run_json(run.run_dir, {k: v for k, v in run.record.items() if k != "schema"})
    except BaseException:
        run.lock.release()
        raise
    return run, checkpoint
