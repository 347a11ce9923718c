"""How close is the memory estimate `offbench run` checks before it starts (offbench/training/memory.py) to the
memory an update really takes?

    nice .venv/bin/python benchmarks/studies/memory_estimate.py [--case NAME ...] [--updates 3]

Answer: benchmarks/studies/memory-estimate.md (the estimate against measured peak RSS, per config).

Each case runs in its own process: open the dataset, resolve the config as `offbench run` does, build the baseline
and its sampler and draw one batch; then reset the process's peak resident set (`/proc/self/clear_refs`, so the
setup's own peak does not count), note the resident set, run `--updates` updates (Adam's state is made on the
first) and read the peak (`VmHWM`). Measured = peak - resident set before the first update, the memory the
updates added; the estimate is `estimate_update_bytes` for the same config. One torch thread. Prints one Markdown
row per case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*

REPO = Path(__file__).resolve().parents[2]

# name: (baseline, dataset, config file or None for the standard one, overrides)
CASES: dict[str, tuple[str, str, str | None, list[str]]] = {
    "ad-tiny": ("ad", "darkroom-small", "tests/training/configs/ad-tiny.toml", []),
    "ad-cpu-darkroom": ("ad", "darkroom-small", "baselines/ad/cpu-darkroom.toml", []),
    "ad-published-b16": ("ad", "darkroom-small", "baselines/ad/default.toml", ["batch_size=16"]),
    "ad-published-b64": ("ad", "darkroom-small", "baselines/ad/default.toml", ["batch_size=64"]),
    "dpt-cpu-darkroom": ("dpt", "darkroom-small", "baselines/dpt/cpu-darkroom.toml", []),
    "dpt-published": ("dpt", "darkroom-small", "baselines/dpt/default.toml", []),
    "dt-pendulum": ("dt", "pendulum-scripted", None, []),
    "dt-pendulum-b1024": ("dt", "pendulum-scripted", None, ["batch_size=1024"]),
}


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure(case: str, updates: int) -> dict:
    """One case in this process (the child's side)."""
    import torch

    torch.set_num_threads(1)
    from offbench.baselines import get_baseline
    from offbench.data.resolve import open_dataset
    from offbench.data.spec import DatasetSpec
    from offbench.training.config import resolve_config
    from offbench.training.memory import estimate_update_bytes
    from offbench.training.trainer import baseline_sampler

    name, dataset, config_file, overrides = CASES[case]
    data = open_dataset(dataset, quiet=True)
    config = resolve_config(get_baseline(name), data.id, REPO / config_file if config_file else None, overrides)
    spec = DatasetSpec.from_store(data.store)
    estimate = estimate_update_bytes(get_baseline(name), config, spec, "cpu")
    baseline = get_baseline(name)(config.baseline, spec, torch.device("cpu"))
    sampler = baseline_sampler(baseline, data.store, config.train.batch_size, 0, "cpu")
    batches = [sampler.sample() for _ in range(updates)]
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
    before = status_kib("VmRSS")
    for batch in batches:
        baseline.update(batch)
    peak = status_kib("VmHWM")
    return {
        "case": case,
        "batch_size": config.train.batch_size,
        "estimate": estimate.total,
        "measured": (peak - before) * 1024,
        "rss_before": before * 1024,
        "formula": estimate.formula,
    }


CASES_HELP = f"cases to run (default all): {', '.join(CASES)}"


def main(
    case: list[str] = typer.Option(None, help=CASES_HELP),
    updates: int = typer.Option(3, help="updates per case"),
    child: str = typer.Option("", hidden=True),
) -> None:
    if child:
        print(json.dumps(measure(child, updates)))
        return
    print("| config | batch | estimate (MB) | measured (MB) | estimate / measured |")
    print("|---|---|---|---|---|")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in case or list(CASES):
        done = subprocess.run(
            [sys.executable, __file__, "--child", name, "--updates", str(updates)], capture_output=True, text=True, env=env, cwd=REPO
        )
        if done.returncode != 0:
            print(f"| {name} | failed: {done.stderr.strip().splitlines()[-1:]} | | | |")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"| {name} | {r['batch_size']} | {r['estimate'] / 2**20:,.0f} | {r['measured'] / 2**20:,.0f} | "
            f"{r['estimate'] / max(r['measured'], 1):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    typer.run(main)
