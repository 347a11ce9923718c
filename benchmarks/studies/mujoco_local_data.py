"""How fast does the mujoco-local recipe run on one CPU core, stage by stage, and how far has a run's learning curve got?

    python benchmarks/studies/mujoco_local_data.py speed --env Hopper-v4
    python benchmarks/studies/mujoco_local_data.py curve RUN_FOLDER    # the recipe's folder under $OFFBENCH_HOME, work, mujoco-local
    python benchmarks/studies/mujoco_local_data.py policy mujoco-local/hopper-medium --episodes 30
    python benchmarks/studies/mujoco_local_data.py episodes mujoco-local/hopper-medium

`speed` times each stage of offbench/generators/mujoco_local.py with torch on one thread: the random warm-up, SAC
training (one gradient step of batch 256 per environment step, 256x256 networks), a checkpoint's write (with its
10-episode evaluation) and restore, and the sampled-policy rollouts that make the medium and expert data. Wall-clock
rates depend on what else runs on the machine; the rates per CPU second are what one dedicated core would give.
`curve` prints a run's checkpoints (step, mean evaluated return) from its workspace, while it trains or after.
`policy` scores the card's medium and expert checkpoints acting on their mean action, on sampled actions (the data's)
and on their expected action (the mean of the squashed Gaussian): the last is what BC trained with MSE on the data
converges to, so it is the score a perfect behaviour cloner would reach. `episodes` groups the data's episodes by
length: their score, reward per step and discounted return from the start, the quantity a critic ranks them by, and
the mean discounted return to go over every step, the scale a critic of the data's values reaches.

Answer: benchmarks/studies/mujoco-local-data.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def rates(seconds_wall: float, seconds_cpu: float, steps: int) -> str:
    return f"{steps / seconds_wall:,.1f} steps/s wall, {steps / seconds_cpu:,.1f} per CPU second"


def timed(work) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def speed(env_id: str, warmup: int, sac_steps: int, rollout_steps: int) -> None:
    import torch

    from offbench import records
    from offbench.generators import mujoco_local as ml

    torch.set_num_threads(1)
    recipe = records.from_dict(
        ml.MujocoLocalRecipe,
        {
            "env_id": env_id,
            "level": "medium",
            "train_steps": warmup + sac_steps,
            "checkpoint_every": warmup + sac_steps,
            "learning_starts": warmup,
        },
        "speed",
    )
    print(f"load average before: {os.getloadavg()}")
    model = ml.new_model(recipe, 0)
    print(f"{env_id} random warm-up: {rates(*timed(lambda: model.learn(warmup)), warmup)}")
    print(f"{env_id} SAC training: {rates(*timed(lambda: model.learn(sac_steps, reset_num_timesteps=False)), sac_steps)}")
    with tempfile.TemporaryDirectory() as workspace:
        checkpoints = []
        wall, _ = timed(lambda: checkpoints.append(ml.write_checkpoint(model, recipe, Path(workspace), start=0)))
        print(
            f"checkpoint write (with a {recipe.evaluation_episodes}-episode evaluation): {wall:.2f} s; "
            f"model.zip {(checkpoints[0].folder / 'model.zip').stat().st_size / 1e6:.1f} MB"
        )
        wall, _ = timed(lambda: ml.restore(recipe, checkpoints, buffer=model.replay_buffer))
        print(f"checkpoint restore: {wall:.2f} s")
    env, act, done = ml.make_env(recipe), ml.sampled_actions(model.actor, 0), []

    def roll_out() -> None:
        for episode in ml.episodes(env, act, iter(range(10**9))):
            done.append(len(episode["actions"]))
            if sum(done) >= rollout_steps:
                return

    wall, cpu = timed(roll_out)
    print(f"{env_id} sampled-policy rollouts: {rates(wall, cpu, sum(done))}")
    print(f"load average after: {os.getloadavg()}")


def curve(workspace: Path) -> None:
    from offbench.generators.mujoco_local import finished_checkpoints

    print("| step | mean return | written |")
    print("|--:|--:|--|")
    for checkpoint in finished_checkpoints(workspace):
        written = time.strftime("%H:%M:%S", time.localtime((checkpoint.folder / "evaluation.json").stat().st_mtime))
        print(f"| {checkpoint.step:,} | {checkpoint.mean_return:.1f} | {written} |")
    references = sorted(workspace.glob("references-*.json"))
    for path in references:
        print(path.name, json.loads(path.read_text()))


def episodes_by_length(dataset_id: str, discount: float, edges: list[int]) -> None:
    import numpy as np

    import offbench
    from offbench.data.cards import get_card

    data, card = offbench.load(dataset_id), get_card(dataset_id)
    lengths, returns, starts = np.asarray(data.episode_lengths), data.episode_returns(), data.episode_starts[:-1]
    to_go = [discounted_to_go(data.rewards[s : s + n], discount) for s, n in zip(starts, lengths)]
    discounted = np.array([episode[0] for episode in to_go])
    scores, bins = card.normalise(returns), np.digitize(lengths, edges)
    print(f"| episode length | episodes | normalised score | reward per step | discounted return from the start ({discount}) |")
    print("|---|--:|--:|--:|--:|")
    for b in np.unique(bins):
        chosen = bins == b
        low, high = edges[b - 1] if b > 0 else 0, edges[b] - 1 if b < len(edges) else lengths.max()
        print(
            f"| {low}-{high} | {chosen.sum()} | {scores[chosen].mean():.1f} | "
            f"{(returns[chosen] / lengths[chosen]).mean():.2f} | {discounted[chosen].mean():.1f} |"
        )
    print(f"| all | {len(lengths)} | {scores.mean():.1f} | {(returns / lengths).mean():.2f} | {discounted.mean():.1f} |")
    print(f"\nMean discounted return to go over every step ({discount}): {np.concatenate(to_go).mean():.1f}")


def discounted_to_go(rewards, discount: float):
    """sum_k discount^k r[t+k] for every step t of one episode (a reverse cumulative sum of the weighted rewards)."""
    import numpy as np

    weights = discount ** np.arange(len(rewards))
    return np.cumsum((np.asarray(rewards, dtype=np.float64) * weights)[::-1])[::-1] / weights


def policy(dataset_id: str, num_episodes: int, seed_base: int) -> None:
    import numpy as np
    import torch

    from offbench import records
    from offbench.data.cards import get_card
    from offbench.generators import mujoco_local as gen

    card = get_card(dataset_id)
    recipe = records.from_dict(gen.MujocoLocalRecipe, card.source.recipe.params, dataset_id)
    checkpoints = gen.finished_checkpoints(gen.workspace_dir(recipe, card.source.recipe.seed))
    if not checkpoints:
        sys.exit(f"{dataset_id}: no SAC run on this machine (offbench download {dataset_id} makes it)")
    expert = gen.choose_expert(checkpoints)
    medium = gen.choose_medium(checkpoints, expert, recipe.medium_fraction)

    def mean_action(actor):
        def act(observation):
            with torch.no_grad():  # sb3's deterministic action of a squashed Gaussian: tanh of its mean
                return actor(torch.as_tensor(observation, dtype=torch.float32)[None], deterministic=True)[0].numpy()

        return act

    env, seeds = gen.make_env(recipe), range(seed_base, seed_base + num_episodes)
    print(f"| checkpoint | actions | normalised score: mean (sd, min-max) over {num_episodes} episodes | mean length |")
    print("|---|---|---|--:|")
    with gen.one_torch_thread():
        for name, checkpoint in (("medium", medium), ("expert", expert)):
            actor = gen.load_actor(checkpoint)
            kinds = (
                ("mean", mean_action(actor)),
                ("sampled", gen.sampled_actions(actor, seed_base)),
                ("expected (256 draws)", gen.sampled_actions(actor, seed_base, draws=256)),
            )
            for actions, act in kinds:
                played = list(gen.episodes(env, act, iter(seeds)))
                score = card.normalise(np.array([gen.episode_return(e) for e in played]))
                length = np.mean([len(e["rewards"]) for e in played])
                print(
                    f"| {name} (SAC step {checkpoint.step:,}) | {actions} | {score.mean():.1f} ({score.std():.1f}, "
                    f"{score.min():.1f}-{score.max():.1f}) | {length:.0f} |"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    timing = commands.add_parser("speed", help="time each stage on one core")
    timing.add_argument("--env", default="Hopper-v4")
    timing.add_argument("--warmup", type=int, default=1000, help="random steps before learning")
    timing.add_argument("--sac-steps", type=int, default=2000, help="SAC steps timed")
    timing.add_argument("--rollout-steps", type=int, default=5000, help="sampled-policy steps timed")
    learning = commands.add_parser("curve", help="a run's checkpoints and returns")
    learning.add_argument("workspace", type=Path)
    scoring = commands.add_parser("policy", help="the medium and expert checkpoints on mean, sampled and expected actions")
    scoring.add_argument("dataset", help="a mujoco-local card, e.g. mujoco-local/hopper-medium")
    scoring.add_argument("--episodes", type=int, default=30)
    scoring.add_argument("--seed-base", type=int, default=10_000, help="reset seeds seed_base..; torch seed of the sampled actions")
    lengths = commands.add_parser("episodes", help="the data's episodes by length: score, reward per step, discounted return")
    lengths.add_argument("dataset", help="a mujoco-local card, e.g. mujoco-local/hopper-medium")
    lengths.add_argument("--discount", type=float, default=0.99, help="the baselines' discount (CORL's for every method)")
    lengths.add_argument("--edges", type=int, nargs="+", default=[250, 300, 350, 400, 500, 700, 1000])
    args = parser.parse_args()
    if args.command == "speed":
        speed(args.env, args.warmup, args.sac_steps, args.rollout_steps)
    elif args.command == "curve":
        curve(args.workspace)
    elif args.command == "episodes":
        episodes_by_length(args.dataset, args.discount, args.edges)
    else:
        policy(args.dataset, args.episodes, args.seed_base)


if __name__ == "__main__":
    main()
