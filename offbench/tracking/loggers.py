"""Logger back-ends behind one small protocol. Local files (the run directory's JSON Lines) are always
on; TensorBoard, Weights & Biases (offline by default: no network) and MLflow (a local SQLite store,
`mlflow.db` in the run directory, unless MLFLOW_TRACKING_URI says otherwise; MLflow 3 refuses its
older `./mlruns` file store by default) are optional extras chosen with `--logger`.

Every back-end can be re-opened on a resumed run: local files are cut back to the byte offsets saved
with the checkpoint, TensorBoard purges events after the checkpoint's step, W&B and MLflow continue
the same run id (points they got between the checkpoint and a crash may appear twice there; the local
files, which leaderboards read, never hold a duplicate).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Protocol

from offbench.errors import OffbenchError, require

METRICS_FILE = "metrics.jsonl"
EVALUATIONS_FILE = "evaluations.jsonl"


class Logger(Protocol):
    def log_metrics(self, step: int, metrics: dict[str, float]) -> None: ...

    def log_evaluation(self, record: dict[str, Any]) -> None: ...

    def close(self, completed: bool) -> None: ...


def evaluation_scalars(record: dict[str, Any]) -> dict[str, float]:
    """An evaluations.jsonl record as flat scalars for dashboards: eval/mean_return, eval_target_3600/..."""
    target = record.get("target_return")
    prefix = "eval" if target is None else f"eval_target_{target:g}"
    keys = ("mean_return", "normalized_score", "success_rate")
    return {f"{prefix}/{key}": float(record[key]) for key in keys if record.get(key) is not None}


class LocalFiles:
    """metrics.jsonl and evaluations.jsonl (docs/run-directory.md). Lines are flushed as written; resume
    truncates both files to `positions` (byte offsets saved with the checkpoint), dropping whatever was
    written after it, so no line is lost or duplicated."""

    def __init__(self, run_dir: Path, positions: dict[str, int] | None = None):
        self.paths = {name: run_dir / name for name in (METRICS_FILE, EVALUATIONS_FILE)}
        self.handles = {}
        for name, path in self.paths.items():
            handle = open(path, "ab")
            if positions is not None:
                handle.truncate(positions.get(name, 0))
                handle.seek(0, os.SEEK_END)
            self.handles[name] = handle

    def _write(self, name: str, record: dict[str, Any]) -> None:
        handle = self.handles[name]
        handle.write((json.dumps(record, allow_nan=False) + "\n").encode())
        handle.flush()

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self._write(METRICS_FILE, {"step": step, **metrics})

    def log_evaluation(self, record: dict[str, Any]) -> None:
        self._write(EVALUATIONS_FILE, record)

    def positions(self) -> dict[str, int]:
        """Byte offsets to resume from; fsynced first, so a checkpoint never points past durable data."""
        for handle in self.handles.values():
            os.fsync(handle.fileno())
        return {name: handle.tell() for name, handle in self.handles.items()}

    def close(self, completed: bool) -> None:
        for handle in self.handles.values():
            handle.close()


class TensorBoardLogger:
    extra = "tensorboard"  # the module and the pip extra that provide it

    def __init__(self, run_dir: Path, run_id: str, config: dict[str, Any], resume_step: int | None):
        require("tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        # purge_step drops events at or after it that a killed process wrote past its last checkpoint
        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=None if resume_step is None else resume_step + 1)
        if resume_step is None:
            self.writer.add_text("config", "```\n" + json.dumps(config, indent=2) + "\n```")

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(f"train/{key}", value, step)
        self.writer.flush()

    def log_evaluation(self, record: dict[str, Any]) -> None:
        for key, value in evaluation_scalars(record).items():
            self.writer.add_scalar(key, value, record["step"])
        self.writer.flush()

    def close(self, completed: bool) -> None:
        self.writer.close()


class WandbLogger:
    extra = "wandb"

    def __init__(self, run_dir: Path, run_id: str, config: dict[str, Any], resume_step: int | None):
        wandb = require("wandb", "wandb")
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "offbench"),
            id=run_id,
            name=run_id,
            dir=str(run_dir),
            config=config,
            mode=os.environ.get("WANDB_MODE", "offline"),
            resume="allow",
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
        )

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log({f"train/{key}": value for key, value in metrics.items()}, step=step)

    def log_evaluation(self, record: dict[str, Any]) -> None:
        self.run.log(evaluation_scalars(record), step=record["step"])

    def close(self, completed: bool) -> None:
        self.run.finish(exit_code=0 if completed else 1)


class MlflowLogger:
    extra = "mlflow"

    def __init__(self, run_dir: Path, run_id: str, config: dict[str, Any], resume_step: int | None):
        require("mlflow", "mlflow")
        import logging

        from mlflow.tracking import MlflowClient

        for name in ("mlflow", "alembic"):  # their INFO lines would break up the progress bar
            logging.getLogger(name).setLevel(logging.WARNING)
        run_dir = run_dir.resolve()
        self.client = MlflowClient(tracking_uri=os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{run_dir / 'mlflow.db'}")
        experiment = self.client.get_experiment_by_name("offbench")
        experiment_id = (
            experiment.experiment_id
            if experiment
            else self.client.create_experiment("offbench", artifact_location=(run_dir / "mlartifacts").as_uri())
        )
        found = self.client.search_runs([experiment_id], filter_string=f"tags.`offbench.run_id` = '{run_id}'")
        if found:
            self.run_id = found[0].info.run_id
        else:
            run = self.client.create_run(experiment_id, run_name=run_id, tags={"offbench.run_id": run_id})
            self.run_id = run.info.run_id
            from mlflow.entities import Param

            self.client.log_batch(self.run_id, params=[Param(k, json.dumps(v)[:6000]) for k, v in sorted(config.items())])

    def _log(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(key, value, now, step) for key, value in values.items()])

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self._log(step, {f"train/{key}": value for key, value in metrics.items()})

    def log_evaluation(self, record: dict[str, Any]) -> None:
        self._log(record["step"], evaluation_scalars(record))

    def close(self, completed: bool) -> None:
        self.client.set_terminated(self.run_id, "FINISHED" if completed else "FAILED")


LOGGERS: dict[str, type] = {
    "tensorboard": TensorBoardLogger,
    "wandb": WandbLogger,
    "mlflow": MlflowLogger,
}


def parse_logger_names(text: str | None) -> list[str]:
    """`--logger tensorboard,wandb` -> ["tensorboard", "wandb"]; an unknown name or a missing package is a
    one-line error (naming the extra to install) before anything is created."""
    names = list(dict.fromkeys(name.strip() for name in (text or "").split(",") if name.strip()))
    for name in names:
        if name not in LOGGERS:
            raise OffbenchError(f"unknown logger '{name}' (known: {', '.join(LOGGERS)}; local files are always written)")
        require(LOGGERS[name].extra, LOGGERS[name].extra)
    return names


def open_loggers(names: list[str], run_dir: Path, run_id: str, config: dict[str, Any], resume_step: int | None) -> list[Logger]:
    return [LOGGERS[name](run_dir, run_id, config, resume_step) for name in names]
