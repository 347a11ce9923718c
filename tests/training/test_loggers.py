"""Every installed logger back-end, for real: a run logs to it, and we read back what it wrote with the
back-end's own reader (TensorBoard's EventAccumulator, W&B's protobuf records, MLflow's client)."""

from __future__ import annotations

import importlib.util
import json
import struct
import subprocess
import sys

import pytest
from helpers import offbench_command
from tiny_runs import run_args

from offbench.errors import OffbenchError
from offbench.tracking.loggers import LOGGERS, parse_logger_names

INSTALLED = [name for name in LOGGERS if importlib.util.find_spec(name) is not None]


def wandb_records(path):
    """Records of a W&B offline run file: a 7-byte ':W&B' header, then LevelDB-log chunks (crc32, length,
    type: 1 full, 2 first, 3 middle, 4 last) in 32 KiB blocks, each record a wandb_internal_pb2.Record."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32 * 1024
    assert data[:4] == b":W&B"
    position, pending, records = 7, b"", []
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # block trailer
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0:  # zero padding up to the end of the block
            position += left
            continue
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


@pytest.mark.skipif(not INSTALLED, reason="no optional logger back-end installed")
def test_installed_backends_hold_what_the_run_logged(pendulum, tmp_path):
    proc = subprocess.run(
        offbench_command(*run_args("bc", "pendulum-scripted", "--logger", ",".join(INSTALLED), tiny=True, out=tmp_path, name="logged")),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "logged"
    losses = {line["step"]: line["actor_loss"] for line in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}
    returns = {line["step"]: line["mean_return"] for line in map(json.loads, (run_dir / "evaluations.jsonl").read_text().splitlines())}
    assert sorted(losses) == [10, 20, 30, 40, 50] and sorted(returns) == [25, 50]

    if "tensorboard" in INSTALLED:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(run_dir / "tensorboard"))
        events.Reload()
        assert {e.step: e.value for e in events.Scalars("train/actor_loss")} == pytest.approx(losses)
        assert {e.step: e.value for e in events.Scalars("eval/mean_return")} == pytest.approx(returns)
        assert {e.step for e in events.Scalars("eval/normalized_score")} == {25, 50}

    if "wandb" in INSTALLED:
        (run_file,) = run_dir.glob("wandb/offline-run-*/run-logged.wandb")
        history = {}
        for record in wandb_records(run_file):
            if record.WhichOneof("record_type") == "history":
                items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                history.setdefault(items["_step"], {}).update(items)
        assert {step: row["train/actor_loss"] for step, row in history.items() if "train/actor_loss" in row} == pytest.approx(losses)
        assert {step: row["eval/mean_return"] for step, row in history.items() if "eval/mean_return" in row} == pytest.approx(returns)

    if "mlflow" in INSTALLED:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
        (run,) = client.search_runs([client.get_experiment_by_name("offbench").experiment_id])
        assert run.info.run_name == "logged" and run.info.status == "FINISHED"
        assert json.loads(run.data.params["hidden_dim"]) == 32
        assert {m.step: m.value for m in client.get_metric_history(run.info.run_id, "train/actor_loss")} == pytest.approx(losses)
        assert {m.step: m.value for m in client.get_metric_history(run.info.run_id, "eval/mean_return")} == pytest.approx(returns)


def test_missing_backend_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if the extra were not installed
    with pytest.raises(OffbenchError, match=r"pip install 'offbench\[mlflow\]'"):
        parse_logger_names("tensorboard,mlflow")
    assert parse_logger_names(" tensorboard, tensorboard ") == ["tensorboard"]
