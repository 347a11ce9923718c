"""XLand sampling speed: how many AD windows per second does offbench's chunk-aware sampler draw from an
XLand-100B-layout file, against the access pattern of the authors' own AD loader?

    .venv/bin/python benchmarks/speed/xland_sampling.py --tasks 48 --seconds 45   # ~3 GB of steps, a few minutes
    .venv/bin/python benchmarks/speed/xland_sampling.py --tasks 8                 # quicker

Answer: docs/results.md, "Speed", and benchmarks/speed/README.md, "XLand sampling".

Writes a synthetic file in the XLand-Trivial-20B layout (32 histories x 60,928 steps per task, gzip 6, chunks
of 4,096 steps: `offbench.data.xland.write_xland_file`) to a temporary folder under /tmp, deletes it after.

The peer is the access pattern of the authors' AD loader (dunnolab/xland-minigrid-datasets,
baselines/ad/src/utils/data.py, `XMiniGridADataset.__getitem__`), re-stated here, not imported: per sample,
`group[name][history]` reads the history's whole row of a dataset, then slices it: states
[start, start + L), actions and rewards [start - 1, start - 1 + L) and actions [start, start + L); windows on
their grid (start = 1 + k * L / 2), drawn in random order; states decoded with divmod; a batch made by
torch's default_collate, as their DataLoader does. Both run in this one process, one thread (their
`num_workers` processes would scale both sides alike).

offbench: `make_sampler("ad_windows", xland, batch_size=B, window_length=L, observation_dtype=...)`: with
uint8 observations (the same bytes the authors' loader hands over) and its default 512 MB chunk cache, the
same with a 16 MB cache (almost no reuse: the gain of reading only the chunks a window touches), and with
float32 observations (the default: 4x the bytes of output).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch
from torch.utils.data import default_collate

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.common
from benchmarks.common import print_table  # noqa: E402
from offbench.data.formats import load_path  # noqa: E402
from offbench.data.samplers import make_sampler  # noqa: E402
from offbench.data.xland import NUM_COLORS, write_xland_file  # noqa: E402

STEPS = 60_928  # XLand-Trivial-20B history length
HISTORIES = 32


class AuthorsADAccess:
    """The authors' AD loader's reads, sample by sample (see the module docstring)."""

    def __init__(self, path: Path, seq_len: int, seed: int):
        self.file = h5py.File(path, "r")
        self.seq_len = seq_len
        self.num_tasks = len(self.file.keys())
        segment = seq_len // 2
        self.num_segments = len(range(1, STEPS - seq_len, segment))
        self.segment = segment
        self.order = np.random.default_rng(seed).permutation(self.num_tasks * HISTORIES * self.num_segments)
        self.position = 0

    def item(self, index: int):
        task, rest = divmod(int(index), HISTORIES * self.num_segments)
        history, segment = divmod(rest, self.num_segments)
        start = 1 + segment * self.segment
        group = self.file[str(task)]
        states = group["states"][history][start : start + self.seq_len]
        states = np.stack(np.divmod(states, NUM_COLORS), axis=-1)
        prev_actions = group["actions"][history][start - 1 : start - 1 + self.seq_len]
        prev_rewards = group["rewards"][history][start - 1 : start - 1 + self.seq_len]
        target_actions = group["actions"][history][start : start + self.seq_len]
        return states, prev_actions, prev_rewards, target_actions

    def sample(self, batch_size: int):
        picks = self.order[self.position : self.position + batch_size]
        self.position = (self.position + batch_size) % (len(self.order) - batch_size)
        return default_collate([self.item(i) for i in picks])


def throughput(draw, batch_size: int, seconds: float) -> tuple[float, int]:
    """Samples per second over at least `seconds` (after one warm-up batch), and batches drawn."""
    draw()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        draw()
        count += 1
    return count * batch_size / (time.perf_counter() - start), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=64)  # the authors' train_micro_batch_size_per_gpu
    parser.add_argument("--window", type=int, default=4096)  # their seq_len
    parser.add_argument("--seconds", type=float, default=30.0, help="Measuring time per contender, split over the rounds.")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory(dir="/tmp", prefix="xland-bench-") as folder:
        path = Path(folder) / "xland-synthetic.hdf5"
        start = time.perf_counter()
        write_xland_file(path, args.tasks, HISTORIES, STEPS, seed=0)
        raw = args.tasks * HISTORIES * STEPS * 30  # bytes per step: 25 state + action + 2 reward + done + expert action
        print(
            f"file: {args.tasks} tasks x {HISTORIES} x {STEPS:,} steps, {raw / 1e9:.2f} GB of steps, "
            f"{path.stat().st_size / 1e9:.2f} GB on disk, written in {time.perf_counter() - start:.0f} s"
        )

        histories = load_path(path)
        authors = AuthorsADAccess(path, args.window, seed=0)
        contenders = {"authors' AD access (h5py row read per sample)": lambda: authors.sample(args.batch_size)}
        samplers = {}
        for dtype, cache_mb in (("uint8", 512), ("uint8", 16), ("float32", 512)):
            name = f"offbench ad_windows, {dtype} observations, {cache_mb} MB chunk cache"
            samplers[name] = make_sampler(
                "ad_windows", histories, args.batch_size, seed=0, window_length=args.window, cache_mb=cache_mb, observation_dtype=dtype
            )
            contenders[name] = samplers[name].sample
        best = {name: 0.0 for name in contenders}
        batches = {name: 0 for name in contenders}
        for _ in range(args.rounds):  # rounds interleave the contenders, so a load swing on a shared machine hits all
            for name, draw in contenders.items():
                rate, count = throughput(draw, args.batch_size, args.seconds / args.rounds)
                best[name], batches[name] = max(best[name], rate), batches[name] + count
        rows = []
        for name in contenders:
            reader = samplers[name].reader if name in samplers else None
            note = f"chunk cache hit rate {reader.hits / max(1, reader.hits + reader.misses):.0%}" if reader else ""
            rows.append((name, best[name], batches[name], note))
        reference = rows[0][1]
        print_table(
            [
                {"sampler": name, "windows/s": f"{rate:,.1f}", "batches": count, "speed-up": f"{rate / reference:.1f}x", "note": note}
                for name, rate, count, note in rows
            ],
            f"B = {args.batch_size}, window = {args.window} steps, best of {args.rounds} interleaved rounds of "
            f">= {args.seconds / args.rounds:g} s each, one thread",
        )


if __name__ == "__main__":
    main()
