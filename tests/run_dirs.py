"""Test helpers: registered tiny datasets, run directories written exactly as docs/run-directory.md says
(as the trainer writes them), and benchmark folders."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import tomli_w
from helpers import make_store

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV = {"id": "Pendulum-v1", "suite": "gymnasium", "kwargs": {}}


def register_dataset(dataset_id: str, seed: int = 0) -> str:
    """A user card plus its native file in $OFFBENCH_HOME; returns the stored content checksum."""
    from offbench.data.cards import card_from_dict, write_card
    from offbench.data.resolve import native_path
    from offbench.paths import user_cards_dir

    card = card_from_dict(
        {
            "id": dataset_id,
            "description": "tiny test dataset",
            "format": "offbench",
            "source": {"recipe": {"generator": "test", "seed": seed}},
            "env": ENV,
            "scores": {"ref_min": -1000.0, "ref_max": 0.0},
        }
    )
    write_card(card, user_cards_dir() / f"{dataset_id.replace('/', '-')}.toml")
    store = make_store(seed=seed)
    store.save(native_path(card))
    return store.content_sha256()


def write_benchmark(root: Path, name: str, datasets: list[str], **overrides: Any) -> Path:
    spec = {
        "title": f"Test benchmark {name}",
        "description": "Made by the tests.",
        "datasets": datasets,
        "metric": "normalized_score",
        "score": "final",
        "min_seeds": 3,
        "bootstrap_reps": 100,
        "evaluation": {"episodes": 5, "every_steps": 100, "steps": 300},
    }
    spec.update(overrides)
    path = root / name / "benchmark.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(spec))
    return path


def write_run(
    root: Path,
    baseline: str,
    dataset_id: str,
    checksum: str,
    seed: int,
    curve: list[float],
    every_steps: int = 100,
    episodes: int = 5,
    config: dict[str, Any] | None = None,
    in_context: list[float] | None = None,
    optimal_return: float | None = None,
    with_summary: bool = True,
    name: str | None = None,
    per_task_success: dict[str, list[float]] | None = None,
    regret: list[float] | None = None,
) -> Path:
    """A finished run whose normalised score at evaluation k (step (k+1) * every_steps) is curve[k].

    Returns are the inverse of the card's normalisation (ref_min -1000, ref_max 0), spread around their mean
    by a seed-dependent offset (so two runs never share their evaluations). In-context runs (in_context given)
    evaluate 5 tasks, each scoring in_context[k] in episode k, and with `regret` (the cumulative curve of the
    final evaluation; earlier evaluations have proportionally more) a regret per line. Multi-task runs
    (per_task_success: task -> success rate at each evaluation) play `episodes` episodes per task.
    checkpoints/last.pt holds bytes unique to the run.
    """
    run_dir = root / (name or f"{baseline}-{dataset_id.replace('/', '-')}-s{seed}")
    run_dir.mkdir(parents=True)
    run_id = run_dir.name
    info = {
        "schema": 1,
        "run_id": run_id,
        "baseline": baseline,
        "dataset": {"id": dataset_id, "path": f"/data/{dataset_id}/data.h5", "content_sha256": checksum, "format": "offbench"},
        "seed": seed,
        "config": {"seed": seed, "lr": 3e-4, "batch_size": 64, **(config or {})},
        "code": {"version": "0.1.0", "git_commit": "0123456789abcdef0123456789abcdef01234567", "git_dirty": False},
        "env": {"python": "3.11", "torch": "2.13.0", "numpy": "2.3", "platform": "linux", "cpu": "test", "device": "cpu"},
        "evaluation": {"episodes": episodes, "every_steps": every_steps, "target_returns": None, "env": ENV},
        "started_at": "2025-01-01T00:00:00+00:00",
    }
    if in_context is not None:
        info["evaluation"].update(protocol="in-context", in_context_episodes=len(in_context), task_ids=list(range(5)), tasks="held-out")
    if per_task_success is not None:
        info["evaluation"].update(protocol="multi-task", tasks=list(per_task_success))
    lines = []
    spread = [0.25 * (i - (episodes - 1) / 2) * (seed + 1) for i in range(episodes)]  # sums to zero
    for k, score in enumerate(curve):
        mean_return = -1000.0 + 10.0 * score if not math.isnan(score) else float("nan")
        line = {
            "step": (k + 1) * every_steps,
            "returns": [mean_return + d for d in spread],
            "lengths": [200] * episodes,
            "mean_return": mean_return,
            "normalized_score": score,
            "success_rate": None,
            "target_return": None,
        }
        if in_context is not None:
            line.update(
                returns=[in_context[-1]] * 5,
                lengths=[20] * 5,
                mean_return=in_context[-1],
                normalized_score=None,
                in_context_returns=in_context,
                task_returns=[list(in_context)] * 5,
            )
        if regret is not None:
            scale = len(curve) - k
            line.update(regret=regret[-1] * scale, in_context_regret=[v * scale for v in regret])
        if per_task_success is not None:
            per_task = {}
            for task_id, (task, rates) in enumerate(per_task_success.items()):
                wins = round(rates[k] * episodes)
                per_task[task] = {
                    "task_id": task_id,
                    "returns": [mean_return + d for d in spread],
                    "mean_return": mean_return,
                    "successes": [i < wins for i in range(episodes)],
                    "success_rate": wins / episodes,
                }
            line.update(
                per_task=per_task,
                returns=[r for block in per_task.values() for r in block["returns"]],
                lengths=[200] * episodes * len(per_task),
                success_rate=sum(block["success_rate"] for block in per_task.values()) / len(per_task),
            )
        if optimal_return is not None:
            line["optimal_return"] = optimal_return
        lines.append(line)
    (run_dir / "run.json").write_text(json.dumps(info))
    (run_dir / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "time_s": 0.1 * s, "loss": 1.0 / s}) + "\n"
            for s in range(every_steps, every_steps * (len(curve) + 1), every_steps)
        )
    )
    (run_dir / "evaluations.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (run_dir / "checkpoints").mkdir()
    write_checkpoint(run_dir, f"checkpoint of {baseline} {dataset_id} {seed} {curve}")
    if with_summary:

        def block(line):
            return {k: line.get(k) for k in ("step", "mean_return", "normalized_score", "success_rate", "target_return", "regret")}

        best = max(
            lines,
            key=lambda line: (
                line["normalized_score"] if line["normalized_score"] is not None and not math.isnan(line["normalized_score"]) else -math.inf
            ),
        )
        summary = {
            "status": "completed",
            "steps": every_steps * len(curve),
            "wall_time_s": 1.0,
            "final": block(lines[-1]),
            "best": block(best),
            "score_metric": "normalized_score",
        }
        (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def pendulum_board(tmp_path: Path, monkeypatch, **changes: Any) -> Path:
    """The repository's pendulum-scripted benchmark, under OFFBENCH_LEADERBOARDS in tmp_path, with `changes` (a
    protocol and seed count tiny runs meet) over its spec; returns the leaderboards root. Its dataset checksum pin
    goes: the test's runs are checked against the copy generated here, which a machine with other SIMD kernels makes
    with other bytes than the board's entries were made from."""
    import tomllib

    from offbench.leaderboard.spec import without_pins

    spec = without_pins(tomllib.loads((REPO_ROOT / "leaderboards" / "pendulum-scripted" / "benchmark.toml").read_text()))
    spec.update(bootstrap_reps=100, **changes)
    root = tmp_path / "leaderboards"
    (root / "pendulum-scripted").mkdir(parents=True)
    (root / "pendulum-scripted" / "benchmark.toml").write_text(tomli_w.dumps(spec))
    monkeypatch.setenv("OFFBENCH_LEADERBOARDS", str(root))
    return root


def write_checkpoint(run_dir: Path, text: str) -> None:
    """checkpoints/last.pt holding weights unique to `text` (what a leaderboard fingerprints a run by)."""
    import hashlib

    import torch

    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    weights = torch.randn(64, generator=torch.Generator().manual_seed(seed))
    torch.save({"step": 1, "baseline": {"net": {"weight": weights, "bias": torch.zeros(4)}}}, run_dir / "checkpoints" / "last.pt")


def make_bench(tmp_path: Path, monkeypatch, levels: dict[str, float], datasets=("test/a", "test/b")) -> dict[str, Any]:
    """A benchmark 'tb' over registered tiny datasets, and a folder of finished runs (3 seeds per baseline
    and dataset; final normalised score near levels[baseline])."""
    import numpy as np

    root = tmp_path / "leaderboards"
    monkeypatch.setenv("OFFBENCH_LEADERBOARDS", str(root))
    checksums = {d: register_dataset(d, seed=i) for i, d in enumerate(datasets)}
    write_benchmark(root, "tb", list(datasets))
    runs = tmp_path / "runs"
    rng = np.random.default_rng(0)
    for baseline, level in levels.items():
        for dataset in datasets:
            for seed in range(3):
                write_run(runs, baseline, dataset, checksums[dataset], seed, [level / 3, level / 2, level + rng.normal(0, 2)])
    return {"root": root, "folder": root / "tb", "runs": runs, "checksums": checksums}


def runs_of(bench: dict[str, Any], baseline: str, dataset: str | None = None) -> list[Path]:
    pattern = f"{baseline}-{dataset.replace('/', '-')}-s*" if dataset else f"{baseline}-*"
    return sorted(bench["runs"].glob(pattern))


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under folder (relative path -> bytes): to check a refusal changed nothing."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".submit.lock"}
