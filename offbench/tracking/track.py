"""A method that is not ours, benchmarked the way ours are: `offbench.evaluate` (a black-box policy) and
`offbench.track` (a user's own training loop). Both write the run directory the trainer writes
(docs/run-directory.md, through `offbench.tracking.run_dir`), so `offbench submit`, `offbench plot` and the
leaderboards read them unchanged; run.json `method` says where the method's code comes from
(`offbench.tracking.provenance`).
"""

from __future__ import annotations

import io
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from offbench.errors import OffbenchError
from offbench.evaluation.external import EvaluationResult, ExternalMethod
from offbench.evaluation.protocols import EvaluationSetup, build_protocol, protocol_name
from offbench.records import to_dict
from offbench.tracking import run_dir as rd
from offbench.tracking.loggers import LocalFiles
from offbench.tracking.provenance import caller_frame, loader_of, source_of
from offbench.tracking.read_run import read_evaluations
from offbench.tracking.run_files import CHECKPOINT, LoaderRecord, MethodRecord, SourceRecord
from offbench.utils import atomic_write_bytes, ensure_dir, safe_component

DEFAULT_EPISODES = 10  # the trainer's default eval_episodes (offbench.training.config.TrainConfig)


def open_for_evaluation(dataset: Any):
    """An id, a path, or a store `offbench.load` returned (opened again by its card's id, which brings the card)."""
    from offbench.data.resolve import open_dataset

    if isinstance(dataset, os.PathLike):
        return open_dataset(Path(dataset))
    if not isinstance(dataset, str):
        card = getattr(dataset, "card", None)
        if not isinstance(card, dict) or not card.get("id"):
            raise OffbenchError(
                f"dataset {type(dataset).__name__}: pass a registered id or a path (this store has no card to evaluate with)"
            )
        dataset = card["id"]
    return open_dataset(dataset)


class Evaluator:
    """A dataset card's protocol, set up once for one seed, playing any policy `ExternalMethod` accepts."""

    def __init__(self, data: Any, setup: EvaluationSetup):
        from offbench.data.spec import DatasetSpec

        self.data, self.setup = data, setup
        self.spec = DatasetSpec.from_store(data.store)
        self.protocol = build_protocol(setup)
        self.protocol.check(self.spec)

    @classmethod
    def new(cls, dataset: Any, seed: int, episodes: int | None, tasks: str, every_steps: int) -> Evaluator:
        """The evaluator of a new run or evaluation, its arguments checked (one-line errors)."""
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
            raise OffbenchError(f"seed must be an integer between 0 and 2**32 - 1, got {seed!r}")
        episodes = DEFAULT_EPISODES if episodes is None else episodes
        if not isinstance(episodes, int) or isinstance(episodes, bool) or not 1 <= episodes <= 1000:
            raise OffbenchError(f"episodes must be an integer between 1 and 1000, got {episodes!r}")
        data = open_for_evaluation(dataset)
        if tasks != "held-out" and protocol_name(data.card) != "in-context":
            raise OffbenchError(f"tasks={tasks!r} applies to in-context evaluation; {data.id} is evaluated {protocol_name(data.card)}")
        return cls(data, EvaluationSetup(card=data.card, seed=seed, episodes=episodes, every_steps=every_steps, tasks=tasks))

    @classmethod
    def of_run(cls, record: dict[str, Any]) -> Evaluator:
        """The evaluator a run recorded in its run.json (what a leaderboard replays it with)."""
        from offbench.training.trainer import setup_from_record

        data = open_for_evaluation(record["dataset"]["id"])
        return cls(data, setup_from_record(record, data.card))

    def evaluate(self, policy: Any, step: int, name: str | None = None) -> EvaluationResult:
        method = ExternalMethod(policy, self.spec.action_space, self.protocol.name, name)
        records = self.protocol.evaluate(method, step)
        return EvaluationResult(
            dataset=self.data.id,
            evaluation=to_dict(self.protocol.describe()),
            metric=self.protocol.score_metric(records),
            records=tuple(records),
        )


def evaluate(
    policy: Any,
    dataset: Any,
    *,
    seed: int = 0,
    episodes: int | None = None,
    tasks: str = "held-out",
    out: str | os.PathLike | None = None,
    method: str | None = None,
) -> EvaluationResult:
    """Play `policy` under `dataset`'s evaluation protocol, exactly as a built-in baseline is played.

    `policy`: a `Policy` (reset / act / observe), an object with `policy(options)`, or a callable
    `observations -> actions` (`(observations, task_ids)` on multi-task cards). `episodes`: episodes (per task on
    multi-task cards, consecutive in context), default 10. `tasks`: in context, "held-out", "validation" (where
    variants are chosen) or "train".
    With `out`, writes a run directory there (it must not exist) that `offbench submit` accepts, as a black-box
    entry (no code to replay it: shown unverified); `method` names it (default: the policy's name)."""
    frame = caller_frame(1)
    evaluator = Evaluator.new(dataset, seed, episodes, tasks, every_steps=0)
    name = method or _default_name(policy)
    started, clock = rd.utc_now(), time.perf_counter()
    result = evaluator.evaluate(policy, step=0, name=name)
    if out is not None:
        write_black_box_run(Path(out), name, source_of(frame), evaluator, result, started, time.perf_counter() - clock)
    return result


def _default_name(policy: Any) -> str:
    from offbench.evaluation.external import method_name_of

    return method_name_of(policy).lower().replace("_", "-")


def write_black_box_run(
    out: Path, name: str, source: dict[str, Any], evaluator: Evaluator, result: EvaluationResult, started: str, elapsed: float
) -> Path:
    """The run directory of one black-box evaluation, built in a temporary folder beside `out` and renamed into place
    (a failure leaves nothing behind, and an existing `out` is never touched)."""
    safe_component(out.name, "out")
    if out.exists():
        raise OffbenchError(f"{out}: already exists (a run directory is never overwritten)")
    ensure_dir(out.parent)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        run_dir = staging / out.name
        run_dir.mkdir()
        config = {"eval_episodes": evaluator.setup.episodes, "steps": 0}
        record = rd.new_run_record(
            run_dir,
            baseline=name,
            method=MethodRecord(kind="black-box", name=name, source=SourceRecord(**source)),
            dataset=evaluator.data,
            seed=evaluator.setup.seed,
            config=config,
            config_sources=["offbench.evaluate"],
            device="cpu",
            evaluation=evaluator.protocol.describe(),
        )
        record.started_at = started
        rd.write_run_json(run_dir, record)
        files = LocalFiles(run_dir)
        for line in result.records:
            files.log_evaluation(line)
        files.close(True)
        rd.write_summary(run_dir, 0, elapsed, None, result.metric)
        os.rename(run_dir, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


class TrackedRun:
    """One run of a user's own training loop (see `track`). Every method is a one-line error once it has closed."""

    def __init__(
        self,
        method: str,
        dataset: Any,
        seed: int,
        config: dict[str, Any] | None,
        out: Path,
        name: str | None,
        episodes: int | None,
        tasks: str,
        eval_every: int,
        device: str,
        frame: Any,
    ):
        safe_component(method, "method")
        config = _json_config(config or {}, seed)
        self.evaluator = Evaluator.new(dataset, seed, episodes, tasks, every_steps=eval_every)
        data = self.evaluator.data
        from offbench.training.trainer import default_run_name

        self.run_dir = rd.create_run_dir(Path(out) / (name or default_run_name(method, data.id, seed)))
        self.lock = rd.TrainingLock(self.run_dir)
        self.method = MethodRecord(kind="own-code", name=method, source=SourceRecord(**source_of(frame)))
        self.record = rd.new_run_record(
            self.run_dir,
            baseline=method,
            method=self.method,
            dataset=data,
            seed=seed,
            config=config,
            config_sources=["offbench.track(config=...)"],
            device=device,
            evaluation=self.evaluator.protocol.describe(),
        )
        rd.write_run_json(self.run_dir, self.record)
        self.files: LocalFiles | None = LocalFiles(self.run_dir)
        self.clock = time.perf_counter()
        self.last_metrics_step = self.last_eval_step = -1

    # -- the context manager: a summary only when the block ends without an exception
    def __enter__(self) -> TrackedRun:
        self._open("with")
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if self.files is None:
            return
        try:
            if exc_type is None and self.last_eval_step >= 0:
                metric = self.evaluator.protocol.score_metric(read_evaluations(self.run_dir))
                rd.write_summary(self.run_dir, self.last_eval_step, time.perf_counter() - self.clock, None, metric)
        finally:
            self.close()
        if exc_type is None and self.last_eval_step < 0:
            raise OffbenchError(f"{self.run_dir}: the run ended without run.evaluate(...), so it has no result (no summary.json written)")

    def close(self) -> None:
        if self.files is not None:
            self.files.close(True)
            self.files = None
            self.lock.release()

    def _open(self, what: str) -> LocalFiles:
        if self.files is None:
            raise OffbenchError(f"{self.run_dir}: run.{what}() after the run was closed (start a new offbench.track)")
        return self.files

    # -- what a training loop calls
    @property
    def dataset(self):
        """The run's dataset (an EpisodeStore)."""
        return self.evaluator.data.store

    @property
    def seed(self) -> int:
        return self.evaluator.setup.seed

    def sampler(self, kind: str, batch_size: int, **options: Any):
        """The sampler a baseline of this kind trains from, on the run's dataset and seeded with the run's seed."""
        from offbench.data.samplers import make_sampler

        self._open("sampler")
        return make_sampler(kind, self.dataset, batch_size, self.seed, **options)

    def log(self, step: int, **metrics: float) -> None:
        """One metrics.jsonl line: finite numbers at a step after the previous line's."""
        files = self._open("log")
        self.last_metrics_step = _next_step(step, self.last_metrics_step, "log", self.run_dir)
        values = {}
        for key, value in metrics.items():
            number = float(value)
            if not math.isfinite(number):
                raise OffbenchError(f"{self.run_dir}: run.log(step={step}) got {key}={value!r}, not a finite number")
            values[key] = number
        files.log_metrics(step, {"time_s": round(time.perf_counter() - self.clock, 3), **values})

    def evaluate(self, step: int, policy: Any) -> EvaluationResult:
        """Play `policy` under the card's protocol (as `offbench.evaluate` does) and record it at `step`."""
        files = self._open("evaluate")
        step = _next_step(step, self.last_eval_step, "evaluate", self.run_dir)
        result = self.evaluator.evaluate(policy, step, self.method.name)
        for line in result.records:
            files.log_evaluation(line)
        self.last_eval_step = step
        return result

    def checkpoint(self, step: int, state: dict[str, Any], load: Callable[[dict[str, Any]], Any] | None = None) -> Path:
        """Save `state` (tensors and plain values: what `torch.load(weights_only=True)` reads) as checkpoints/last.pt.
        `load(state) -> policy` (a module-level function) rebuilds the evaluated policy from it: with it, a
        leaderboard can replay the run's final evaluation (`offbench submit --verify`)."""
        import torch

        files = self._open("checkpoint")
        buffer = io.BytesIO()
        torch.save({"step": step, "baseline": state, "files": files.positions()}, buffer)
        try:
            torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
        except Exception as exc:  # noqa: BLE001 - what weights_only refuses varies; the message says what it is
            raise OffbenchError(
                f"{self.run_dir}: run.checkpoint(state) holds something weights_only loading refuses "
                f"({str(exc).splitlines()[-1][:160]}); keep to tensors, numbers, strings, lists and dicts"
            ) from None
        if load is not None and self.method.load != (spec := LoaderRecord(**loader_of(load))):
            self.method.load = spec
            rd.write_run_json(self.run_dir, self.record)
        return atomic_write_bytes(self.run_dir / CHECKPOINT, buffer.getvalue())


def _next_step(step: Any, previous: int, what: str, run_dir: Path) -> int:
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise OffbenchError(f"{run_dir}: run.{what}(step={step!r}): step must be a non-negative integer")
    if step <= previous:
        raise OffbenchError(f"{run_dir}: run.{what}(step={step}) after step {previous}: steps must increase")
    return step


def _json_config(config: Any, seed: int) -> dict[str, Any]:
    import json

    if not isinstance(config, dict):
        raise OffbenchError(f"config must be a dict of JSON values, got {type(config).__name__}")
    try:
        config = json.loads(json.dumps(config, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise OffbenchError(f"config must hold only JSON values (numbers, strings, lists, dicts): {exc}") from None
    if "seed" in config and config["seed"] != seed:
        raise OffbenchError(f"config seed {config['seed']!r} differs from seed={seed}")
    return config


def track(
    method: str,
    *,
    dataset: Any,
    seed: int = 0,
    config: dict[str, Any] | None = None,
    out: str | os.PathLike = "runs",
    name: str | None = None,
    episodes: int | None = None,
    tasks: str = "held-out",
    eval_every: int = 0,
    device: str = "cpu",
) -> TrackedRun:
    """Track a run of your own training loop in an offbench run directory (`out/name`):

        with offbench.track("my-method", dataset="pendulum-scripted", seed=0, config=cfg) as run:
            batches = run.sampler("transitions", batch_size=256)
            ...; run.log(step, loss=loss); run.evaluate(step, policy); run.checkpoint(step, state, load=build_policy)

    Evaluations follow the card's protocol (`episodes` per evaluation, default 10); `eval_every` is recorded as the
    schedule (leaderboards may require one). The block's end writes summary.json; an exception leaves the run
    unfinished (no summary), as a crashed trainer does."""
    return TrackedRun(method, dataset, seed, config, Path(out), name, episodes, tasks, eval_every, device, caller_frame(1))
