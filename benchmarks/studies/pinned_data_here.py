"""Which of the boards' pinned generated datasets does this machine make bit for bit? For each board's
`[dataset_checksums]` pin whose card is a recipe, generate the dataset from its card in a scratch OFFBENCH_HOME (one
niced `offbench download` subprocess each, killed at --timeout) and compare the content sha256 with the pin. A
dataset that differs cannot take new rows from this machine; where it differs because of the SIMD kernels, the board
states the pinned copy's in `[dataset_made_on]`.

    .venv/bin/python benchmarks/studies/pinned_data_here.py --datasets pendulum-scripted darkroom-ad-eps-fast \
        --timeout 900 --scratch /tmp/pinned-here

Answer: benchmarks/studies/pinned-data-here.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pinned_recipes() -> dict[str, tuple[str, str]]:
    """dataset id -> (board, pinned sha256), for every pinned dataset whose card is a generator recipe."""
    from offbench.leaderboard.scoring import benchmark_card
    from offbench.leaderboard.spec import known_benchmarks, load_spec

    pins = {}
    for board in known_benchmarks():
        for dataset_id, sha in load_spec(board).dataset_checksums.items():
            if benchmark_card(dataset_id).source.recipe is not None:
                pins[dataset_id] = (board, sha)
    return pins


def made_here(dataset_id: str, timeout: float) -> tuple[str | None, float, str]:
    """(content sha256 or None, seconds, what went wrong) of the dataset generated into $OFFBENCH_HOME."""
    from offbench.data.cards import get_card
    from offbench.data.resolve import native_path
    from offbench.data.store import stored_checksum

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    try:
        proc = subprocess.run(
            ["nice", "-n", "10", sys.executable, "-m", "offbench", "download", dataset_id],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - started, f"not done in {timeout:.0f} s"
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        return None, seconds, (proc.stderr.strip().splitlines() or ["failed"])[-1]
    return stored_checksum(native_path(get_card(dataset_id))), seconds, ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", help="pinned dataset ids (default: every pinned recipe)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per dataset before it is given up")
    parser.add_argument("--scratch", type=Path, help="OFFBENCH_HOME to generate into (default: a temporary folder)")
    args = parser.parse_args()

    from offbench.machine import made_on

    os.environ["OFFBENCH_HOME"] = str(args.scratch or tempfile.mkdtemp(prefix="pinned-here-"))  # here and in the children
    pins = pinned_recipes()
    unknown = [d for d in args.datasets or [] if d not in pins]
    if unknown:
        sys.exit(f"not a pinned recipe dataset: {', '.join(unknown)} (pinned: {', '.join(sorted(pins))})")
    here = made_on()
    print(f"this machine: {here['cpu']}, torch {here['torch_cpu_capability']}, numpy {'+'.join(here['numpy_simd'])}\n")
    print("| board | dataset | pinned | made here | same | seconds |")
    print("|:--|:--|:--|:--|:--|--:|")
    for dataset_id in args.datasets or sorted(pins):
        board, pinned = pins[dataset_id]
        got, seconds, problem = made_here(dataset_id, args.timeout)
        verdict = problem or ("yes" if got == pinned else "**no**")
        print(f"| {board} | {dataset_id} | {pinned[:8]} | {(got or '-')[:8]} | {verdict} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
