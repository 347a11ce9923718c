"""Sampling speed: how many DT segments and transitions per second does offbench draw from a 1M-transition
dataset, against Minari and d3rlpy on the same data, in one run?

    .venv/bin/python benchmarks/speed/sampling.py --repeats 5

Answer: docs/results.md, "Speed" (the ratio table), and benchmarks/speed/README.md, "Sampling" (the full
table, conditions, and what the profile showed).

One synthetic hopper-shaped dataset (1000 episodes x 1000 steps, obs 17, act 6, half the episodes
terminated, half truncated) is written once to a temp folder as an offbench native file and as a
Minari dataset (Minari's HDF5 layout, written with h5py). Then, side by side:

- offbench: `load_native` (memory-mapped) + `make_sampler`, DT segments (B=256, K=20) and transitions;
- Minari 0.5.4: `minari.load_dataset` + `sample_episodes(256)`, each episode cut into a K-step
  left-padded segment with returns-to-go, as a user writes it (`minari_segments` below);
- d3rlpy 2.8 (own venv, `benchmarks/common.py`): `MDPDataset` built from the native file's arrays read with
  h5py, `sample_trajectory_batch(256, 20)` and `sample_transition_batch(256)`.

Throughput is the best of a few repeats of >= `--seconds` each (the machine may be shared), in
samples per second (one sample = one segment or one transition). Everything runs on one CPU thread.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import gymnasium as gym
import h5py
import numpy as np
import torch
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.common
from benchmarks.common import cli_help, print_table, run_peer  # noqa: E402
from offbench.data.samplers import make_sampler  # noqa: E402
from offbench.data.store import EpisodeStore, load_native  # noqa: E402

BATCH, K = 256, 20

D3RLPY_SCRIPT = r"""
import json, sys, time
import h5py, numpy as np, d3rlpy
path, batch, k, seconds, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
np.random.seed(0)
t0 = time.perf_counter()
with h5py.File(path, "r") as f:
    arrays = {name: f[name][()] for name in ("observations", "actions", "rewards", "terminations", "truncations")}
dataset = d3rlpy.dataset.MDPDataset(
    observations=arrays["observations"], actions=arrays["actions"], rewards=arrays["rewards"],
    terminals=arrays["terminations"].astype(np.float32), timeouts=arrays["truncations"].astype(np.float32),
    action_space=d3rlpy.constants.ActionSpace.CONTINUOUS,
)
load = time.perf_counter() - t0

def rate(fn):
    best = 0.0
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            fn(); n += 1
        best = max(best, n * batch / (time.perf_counter() - t0))
    return best

print(json.dumps({
    "episodes": len(dataset.episodes), "load_s": load,
    "segments": rate(lambda: dataset.sample_trajectory_batch(batch, k)),
    "transitions": rate(lambda: dataset.sample_transition_batch(batch)),
}))
"""


def synthetic_store(episodes: int, steps: int, seed: int = 0) -> EpisodeStore:
    rng = np.random.default_rng(seed)
    n = episodes * steps
    terminations = np.zeros(n, bool)
    truncations = np.zeros(n, bool)
    last = np.arange(1, episodes + 1) * steps - 1
    terminations[last[::2]] = True
    truncations[last[1::2]] = True
    return EpisodeStore(
        observations=rng.standard_normal((n, 17), dtype=np.float32),
        actions=rng.uniform(-1, 1, (n, 6)).astype(np.float32),
        rewards=rng.uniform(0, 4, n).astype(np.float32),
        terminations=terminations,
        truncations=truncations,
        episode_starts=np.arange(episodes + 1) * steps,
        final_observations=rng.standard_normal((episodes, 17), dtype=np.float32),
        observation_space=gym.spaces.Box(-np.inf, np.inf, (17,), np.float32),
        action_space=gym.spaces.Box(-1, 1, (6,), np.float32),
        card={"id": "bench/synthetic-hopper"},
    )


def write_minari(store: EpisodeStore, root: Path, dataset_id: str) -> None:
    """Minari 0.5's HDF5 layout (described in offbench/data/minari_format.py): one group per episode, observations with the final row."""
    from minari.serialization import serialize_space

    data = root / f"{dataset_id}" / "data"
    data.mkdir(parents=True)
    with h5py.File(data / "main_data.hdf5", "w") as f:
        for e in range(store.num_episodes):
            ep = store.episode(e)
            group = f.create_group(f"episode_{e}")
            group.attrs.update({"id": e, "total_steps": len(ep["rewards"])})
            for key in ("observations", "actions", "rewards", "terminations", "truncations"):
                group.create_dataset(key, data=ep[key])
    metadata = {
        "dataset_id": dataset_id,
        "minari_version": "0.5.4",
        "data_format": "hdf5",
        "total_episodes": store.num_episodes,
        "total_steps": store.num_transitions,
        "observation_space": serialize_space(store.observation_space),
        "action_space": serialize_space(store.action_space),
    }
    (data / "metadata.json").write_text(json.dumps(metadata))


def minari_segments(dataset, rng: np.random.Generator, batch: int, k: int) -> dict[str, torch.Tensor]:
    """What a user writes with Minari: sample episodes, cut one left-padded K-step segment from each."""
    obs, act, rtg, ts, mask = [], [], [], [], []
    for ep in dataset.sample_episodes(batch):
        length = len(ep.rewards)
        end = int(rng.integers(length)) + 1
        start = max(0, end - k)
        pad = k - (end - start)
        returns = np.cumsum(ep.rewards[::-1])[::-1]
        obs.append(np.concatenate([np.zeros((pad, ep.observations.shape[1]), np.float32), ep.observations[start:end]]))
        act.append(np.concatenate([np.zeros((pad, ep.actions.shape[1]), np.float32), ep.actions[start:end]]))
        rtg.append(np.concatenate([np.zeros(pad, np.float32), returns[start:end]]))
        ts.append(np.concatenate([np.zeros(pad, np.int64), np.arange(start, end)]))
        mask.append(np.arange(k) >= pad)
    return {
        name: torch.from_numpy(np.stack(v))
        for name, v in {"observations": obs, "actions": act, "returns_to_go": rtg, "timesteps": ts, "mask": mask}.items()
    }


def rate(fn: Callable[[], object], batch: int, seconds: float, repeats: int) -> float:
    best = 0.0
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            fn()
            n += 1
        best = max(best, n * batch / (time.perf_counter() - t0))
    return best


def best_time(fn: Callable[[], object], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(
    episodes: int = typer.Option(1000, help="episodes in the synthetic dataset"),
    steps: int = typer.Option(1000, help="steps per episode"),
    seconds: float = typer.Option(1.0, help="minimum time per throughput measurement"),
    repeats: int = typer.Option(3, help="repeats per measurement (the best is kept)"),
) -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="offbench-sampling-") as tmp:
        tmp = Path(tmp)
        store = synthetic_store(episodes, steps)
        path = store.save(tmp / "synthetic.h5")
        minari_root = tmp / "minari"
        os.environ["MINARI_DATASETS_PATH"] = str(minari_root)
        write_minari(store, minari_root, "bench/synthetic-v0")
        del store
        print(f"dataset: {episodes} episodes x {steps} steps, written to {tmp}", flush=True)

        import minari

        # ---- load: open the file and be ready to draw the first batch
        def offbench_ready():
            return make_sampler("segments", load_native(path), BATCH, seed=0, segment_length=K)

        load = {"offbench": best_time(offbench_ready), "minari": best_time(lambda: minari.load_dataset("bench/synthetic-v0"))}

        # ---- throughput
        mapped = load_native(path)
        in_memory = load_native(path, mmap=False)
        seg = make_sampler("segments", mapped, BATCH, seed=0, segment_length=K)
        seg_mem = make_sampler("segments", in_memory, BATCH, seed=0, segment_length=K)
        trans = make_sampler("transitions", mapped, BATCH, seed=0)
        trans_mem = make_sampler("transitions", in_memory, BATCH, seed=0)
        dataset = minari.load_dataset("bench/synthetic-v0")
        dataset.set_seed(0)
        rng = np.random.default_rng(0)
        rates = {
            ("segments", "offbench"): rate(seg.sample, BATCH, seconds, repeats),
            ("segments", "offbench in RAM (mmap=False)"): rate(seg_mem.sample, BATCH, seconds, repeats),
            ("transitions", "offbench"): rate(trans.sample, BATCH, seconds, repeats),
            ("transitions", "offbench in RAM (mmap=False)"): rate(trans_mem.sample, BATCH, seconds, repeats),
            ("segments", "minari"): rate(lambda: minari_segments(dataset, rng, BATCH, K), BATCH, seconds, repeats),
        }
        output = run_peer("d3rlpy", D3RLPY_SCRIPT, str(path), str(BATCH), str(K), str(seconds), str(repeats))
        peer = json.loads(output.strip().splitlines()[-1])  # d3rlpy logs to stdout before it
        assert peer["episodes"] == episodes, peer
        rates[("segments", "d3rlpy")] = peer["segments"]
        rates[("transitions", "d3rlpy")] = peer["transitions"]
        load["d3rlpy"] = peer["load_s"]

    rows = []
    for (kind, who), value in rates.items():
        ours = rates[(kind, "offbench")]
        rows.append(
            {
                "batch": f"{kind} (B={BATCH}" + (f", K={K})" if kind == "segments" else ")"),
                "library": who,
                "result": f"{value:,.0f} samples/s",
                "offbench speed-up": f"{ours / value:.1f}x",
            }
        )
    for who, seconds_taken in load.items():
        rows.append(
            {
                "batch": f"load {episodes * steps:,} transitions, ready to sample",
                "library": who,
                "result": f"{seconds_taken:.4f} s",
                "offbench speed-up": f"{seconds_taken / load['offbench']:.2f}x",
            }
        )
    print_table(rows, "Sampling: offbench against Minari and d3rlpy (one thread)")


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)  # --help: the question, the command and where the answer stands
    typer.run(main)
