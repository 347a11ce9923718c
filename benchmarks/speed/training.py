"""Training speed: how many updates per second do offbench's DT and CQL run, and what do they score, against
d3rlpy 2.8's with the same architecture, batch and number of updates, on one dataset, in one run?

    .venv/bin/python benchmarks/speed/training.py                       # small default: 2 seeds, DT 500, CQL 200 updates
    .venv/bin/python benchmarks/speed/training.py --seeds 3 --dt-steps 500 --cql-steps 2000 --episodes 5

Answer: docs/results.md, "Speed", and benchmarks/speed/README.md, "Training" (the full table, what each side
computes per update, and what was tried and dropped).

Dataset: `pendulum-scripted` (Pendulum-v1, a scripted swing-up controller with action noise, 20k steps;
generated on first use). d3rlpy runs in its own virtual environment (`benchmarks/common.py`) and reads the
same native HDF5 file with h5py.

Both libraries get the same architecture, batch size, learning rates and number of updates, taken from
offbench's standard configs for the dataset (`baselines/dt/pendulum-scripted.toml`,
`baselines/cql/pendulum-scripted.toml`) and mapped onto d3rlpy's options in `d3rlpy_settings` below:

- DT: K 10, 3 layers x 1 head x 64, GELU MLPs, dropout 0.1, linear state embedding, learned timestep
  embedding, AdamW (weight decay 1e-4) with linear warm-up, gradient clipping 0.25, returns-to-go x 0.01,
  standardised observations, actions scaled from [-2, 2] to the tanh range; evaluated at the target return.
- CQL: SAC-based, twin critics and a tanh-Gaussian actor of the same MLP shape, 10 sampled actions per
  state for the importance-sampled logsumexp, fixed conservative weight (no Lagrangian), entropy tuned
  to -|A|, Polyak 5e-3, standardised observations; evaluated with the deterministic action.
  d3rlpy's CQL differs from CORL's (which offbench follows) in two details it does not let us change:
  its TD target uses the actor's deterministic action, and its networks use PyTorch's default init.

Throughput is updates per second of the training loop (sampling included, evaluation excluded), in
process CPU time (the machine may be shared: CPU time is what contention distorts least) and in wall
time, both sides on the same number of torch threads (`--threads`, default 1). Runs are interleaved
(offbench seed 0, d3rlpy seed 0, offbench seed 1, ...). Scores are the mean return over `--episodes`
evaluation episodes (reset seeds 10000 + i, the same on both sides), then mean and std over seeds.
"""

from __future__ import annotations

import json
import random
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
import torch
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.common
import offbench  # noqa: E402
from benchmarks.common import REPO, cli_help, machine, run_peer  # noqa: E402
from offbench.baselines import get_baseline  # noqa: E402
from offbench.baselines.base import DatasetSpec  # noqa: E402
from offbench.data.samplers import make_sampler  # noqa: E402
from offbench.evaluation.policy import PolicyOptions  # noqa: E402
from offbench.training.config import parse_override  # noqa: E402

DATASET = "pendulum-scripted"
ENV_ID = "Pendulum-v1"
EVAL_SEED = 10_000
CONFIGS = REPO / "baselines"

D3RLPY_WORKER = r'''
import json, sys, time
import gymnasium as gym, h5py, numpy as np, torch, d3rlpy

job = json.loads(sys.argv[1])
torch.set_num_threads(job["threads"])
s = job["settings"]
with h5py.File(job["path"], "r") as f:
    arrays = {k: f[k][()] for k in ("observations", "actions", "rewards", "terminations", "truncations", "episode_starts", "final_observations")}


def mdp_dataset(append_final_observations):
    """d3rlpy takes s' from the next row and drops the last step of an episode that is not terminated. For
    Q-learning, each truncated episode gets its final observation as one extra row (zero action and reward),
    so every real transition is kept with its true s'; DT trains on the episodes as they are."""
    obs, act, rew, term, trunc = (arrays[k] for k in ("observations", "actions", "rewards", "terminations", "truncations"))
    starts = arrays["episode_starts"]
    rows = {"observations": [], "actions": [], "rewards": [], "terminals": [], "timeouts": []}
    for e in range(len(starts) - 1):
        lo, hi = starts[e], starts[e + 1]
        parts = [obs[lo:hi]], [act[lo:hi]], [rew[lo:hi]], [term[lo:hi]], [trunc[lo:hi]]
        if append_final_observations and not term[hi - 1]:
            parts[0].append(arrays["final_observations"][e : e + 1])
            parts[1].append(np.zeros_like(act[lo : lo + 1]))
            parts[2].append(np.zeros_like(rew[lo : lo + 1]))
            parts[3].append(np.zeros(1, bool))
            parts[4][0] = np.zeros(hi - lo, bool)
            parts[4].append(np.ones(1, bool))
        for key, part in zip(rows, parts):
            rows[key].append(np.concatenate(part))
    cat = {k: np.concatenate(v) for k, v in rows.items()}
    return d3rlpy.dataset.MDPDataset(
        cat["observations"], cat["actions"], cat["rewards"], cat["terminals"].astype(np.float32),
        cat["timeouts"].astype(np.float32), action_space=d3rlpy.constants.ActionSpace.CONTINUOUS,
    )


d3rlpy.seed(job["seed"])
low, high = float(s["action_low"]), float(s["action_high"])
scaler = dict(observation_scaler=d3rlpy.preprocessing.StandardObservationScaler(),
              action_scaler=d3rlpy.preprocessing.MinMaxActionScaler(minimum=np.array([low]), maximum=np.array([high])))
if job["algo"] == "cql":
    dataset = mdp_dataset(True)
    encoder = d3rlpy.models.VectorEncoderFactory([s["hidden_dim"]] * s["hidden_layers"])
    algo = d3rlpy.algos.CQLConfig(
        **scaler, actor_encoder_factory=encoder, critic_encoder_factory=encoder, batch_size=s["batch_size"],
        gamma=s["discount"], tau=s["tau"], actor_learning_rate=s["policy_lr"], critic_learning_rate=s["critic_lr"],
        temp_learning_rate=s["policy_lr"], alpha_learning_rate=0.0, initial_alpha=1.0, conservative_weight=s["cql_alpha"],
        n_action_samples=s["cql_n_actions"], n_critics=2,
    ).create(device="cpu:0")
else:
    dataset = mdp_dataset(False)
    optim = d3rlpy.optimizers.AdamWFactory(
        weight_decay=s["weight_decay"], clip_grad_norm=s["grad_clip"],
        lr_scheduler_factory=d3rlpy.optimizers.WarmupSchedulerFactory(warmup_steps=s["warmup_steps"]),
    )
    algo = d3rlpy.algos.DecisionTransformerConfig(
        **scaler, reward_scaler=d3rlpy.preprocessing.MultiplyRewardScaler(s["reward_scale"]),
        batch_size=s["batch_size"], learning_rate=s["learning_rate"], context_size=s["segment_length"],
        max_timestep=s["max_timestep"], num_heads=s["num_heads"], num_layers=s["num_layers"],
        attn_dropout=s["dropout"], resid_dropout=s["dropout"], embed_dropout=s["dropout"], activation_type="gelu",
        encoder_factory=d3rlpy.models.VectorEncoderFactory([s["embedding_dim"]], exclude_last_activation=True),
        optim_factory=optim,
    ).create(device="cpu:0")
algo.build_with_dataset(dataset)
cpu, wall = time.process_time(), time.perf_counter()
algo.fit(dataset, n_steps=job["steps"], n_steps_per_epoch=job["steps"], show_progress=False,
         save_interval=job["steps"] + 1, logger_adapter=d3rlpy.logging.NoopAdapterFactory())
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall

env, returns = gym.make(job["env"]), []
for i in range(job["episodes"]):
    obs, _ = env.reset(seed=job["eval_seed"] + i)
    policy = algo.as_stateful_wrapper(target_return=s["target_return"]) if job["algo"] == "dt" else None
    total, reward, done = 0.0, 0.0, False
    while not done:
        action = policy.predict(obs, reward) if policy else algo.predict(obs[None].astype(np.float32))[0]
        obs, reward, terminated, truncated, _ = env.step(action)
        total, done = total + float(reward), terminated or truncated
    returns.append(total)
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "returns": returns}))
'''


def standard_config(algo: str, overrides: list[str]) -> dict[str, Any]:
    """offbench's standard config for the dataset, with `key=value` overrides (as `offbench run --set`)."""
    values = tomllib.loads((CONFIGS / algo / f"{DATASET}.toml").read_text())
    values.pop("source")
    for text in overrides:
        key, value = parse_override(text)
        if key not in values:
            raise typer.BadParameter(f"{key} is not a key of baselines/{algo}/{DATASET}.toml")
        values[key] = value
    return values


def d3rlpy_settings(algo: str, config: dict[str, Any], spec: DatasetSpec) -> dict[str, Any]:
    """offbench's config in the terms the d3rlpy worker maps onto d3rlpy's options."""
    bounds = {"action_low": float(spec.action_space.low[0]), "action_high": float(spec.action_space.high[0])}
    if algo == "cql":
        if config["critic_hidden_layers"] != config["actor_hidden_layers"]:
            raise ValueError("d3rlpy's CQL here uses one MLP shape for actor and critics")
        keys = ("batch_size", "discount", "tau", "policy_lr", "critic_lr", "cql_alpha", "cql_n_actions", "hidden_dim")
        return {**bounds, **{k: config[k] for k in keys}, "hidden_layers": config["critic_hidden_layers"]}
    if not config["embedding_dropout"] == config["attention_dropout"] == config["residual_dropout"]:
        raise ValueError("d3rlpy's DT settings here use one dropout rate")
    keys = (
        "batch_size",
        "learning_rate",
        "segment_length",
        "num_heads",
        "num_layers",
        "embedding_dim",
        "weight_decay",
        "grad_clip",
        "warmup_steps",
        "reward_scale",
    )
    return {
        **bounds,
        **{k: config[k] for k in keys},
        "dropout": config["embedding_dropout"],
        "max_timestep": spec.max_episode_length,
        "target_return": config["target_returns"][0],
    }


def evaluate(policy, episodes: int) -> list[float]:
    env, returns = gym.make(ENV_ID), []
    for i in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + i)
        policy.reset(1)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy.act(obs[None])[0])
            policy.observe(np.array([reward]), np.array([terminated or truncated]))
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return returns


def run_offbench(algo: str, config: dict[str, Any], store, spec: DatasetSpec, seed: int, steps: int, episodes: int) -> dict:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    cls = get_baseline(algo)
    baseline = cls(cls.Config(**{k: v for k, v in config.items() if hasattr(cls.Config, k)}), spec, "cpu")
    options = baseline.sampler_options() if hasattr(baseline, "sampler_options") else {}
    sampler = make_sampler(baseline.sampler, store, config["batch_size"], seed, **options)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(steps):
        baseline.update(sampler.sample())
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    policy = baseline.policy(PolicyOptions(target_return=config["target_returns"][0] if algo == "dt" else None))
    return {"cpu_s": cpu, "wall_s": wall, "returns": evaluate(policy, episodes)}


def run_d3rlpy(algo: str, settings: dict[str, Any], path: Path, seed: int, steps: int, episodes: int, threads: int) -> dict:
    job = {
        "algo": algo,
        "settings": settings,
        "path": str(path),
        "seed": seed,
        "steps": steps,
        "episodes": episodes,
        "threads": threads,
        "env": ENV_ID,
        "eval_seed": EVAL_SEED,
    }
    return json.loads(run_peer("d3rlpy", D3RLPY_WORKER, json.dumps(job)).strip().splitlines()[-1])


def main(
    algos: str = typer.Option("dt,cql", help="Comma-separated: dt, cql."),
    seeds: int = typer.Option(2, help="Training seeds per library."),
    dt_steps: int = typer.Option(500, help="DT updates per run."),
    cql_steps: int = typer.Option(200, help="CQL updates per run."),
    episodes: int = typer.Option(5, help="Evaluation episodes per run."),
    threads: int = typer.Option(1, help="torch threads, the same for both libraries."),
    dt_set: list[str] = typer.Option([], "--dt-set", help="KEY=VALUE over DT's standard config (repeatable)."),
    cql_set: list[str] = typer.Option([], "--cql-set", help="KEY=VALUE over CQL's standard config (repeatable)."),
) -> None:
    torch.set_num_threads(threads)
    store = offbench.load(DATASET)
    spec = DatasetSpec.from_store(store)
    rows = []
    for algo in [a.strip() for a in algos.split(",") if a.strip()]:
        config = standard_config(algo, dt_set if algo == "dt" else cql_set)
        settings = d3rlpy_settings(algo, config, spec)
        steps = dt_steps if algo == "dt" else cql_steps
        for seed in range(seeds):
            for library in ("offbench", "d3rlpy"):
                if library == "offbench":
                    result = run_offbench(algo, config, store, spec, seed, steps, episodes)
                else:
                    result = run_d3rlpy(algo, settings, store.path, seed, steps, episodes, threads)
                rows.append(
                    {
                        "algo": algo,
                        "library": library,
                        "seed": seed,
                        "steps/s (cpu)": steps / result["cpu_s"],
                        "steps/s (wall)": steps / result["wall_s"],
                        "return": float(np.mean(result["returns"])),
                    }
                )
                print(
                    f"{algo} {library:8s} seed {seed}: {rows[-1]['steps/s (cpu)']:7.1f} steps/s (cpu), return {rows[-1]['return']:8.1f}",
                    file=sys.stderr,
                    flush=True,
                )
    table = (
        pd.DataFrame(rows)
        .groupby(["algo", "library"])
        .agg(
            steps_cpu=("steps/s (cpu)", "median"),
            steps_wall=("steps/s (wall)", "median"),
            return_mean=("return", "mean"),
            return_std=("return", "std"),
        )
    )
    for algo in table.index.get_level_values("algo").unique():
        table.loc[(algo, "offbench"), "ratio_cpu"] = table.loc[(algo, "offbench"), "steps_cpu"] / table.loc[(algo, "d3rlpy"), "steps_cpu"]
        table.loc[(algo, "offbench"), "ratio_wall"] = (
            table.loc[(algo, "offbench"), "steps_wall"] / table.loc[(algo, "d3rlpy"), "steps_wall"]
        )
    print(
        f"{DATASET}: {seeds} seeds, DT {dt_steps} updates, CQL {cql_steps} updates, {episodes} evaluation episodes, "
        f"{threads} torch thread(s), overrides {list(dt_set) + list(cql_set) or 'none'}; "
        "steps/s = median over seeds, return = mean (std) over seeds"
    )
    print(f"measured {machine()}")
    print(table.round(2).to_string())


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)  # --help: the question, the command and where the answer stands
    typer.run(main)
