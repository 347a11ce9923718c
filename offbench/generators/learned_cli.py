"""`offbench generate minigrid-learned|metaworld-learned|mujoco-local`: data from RL agents trained on this machine (stable-baselines3,
the "learned" extra), written and registered as `offbench generate metaworld|minigrid` do. Options left out take the
recipe's defaults, so the options of a built-in card (say `--suite MT3 --quality replay`) fill that card's dataset."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, Optional

import typer

from offbench.errors import OffbenchError
from offbench.generators.multitask_cli import OUT_HELP, Generated, print_task_table, task_list, write_generated, written


def add_commands(generate_app: typer.Typer) -> None:
    """Register `offbench generate minigrid-learned`, `metaworld-learned` and `mujoco-local`."""
    generate_app.command("minigrid-learned")(generate_minigrid_learned)
    generate_app.command("metaworld-learned")(generate_metaworld_learned)
    generate_app.command("mujoco-local")(generate_mujoco_local)


ID_HELP = "Dataset id (default: derived from the options)."
SET_HELP = "Another recipe parameter NAME=VALUE, repeatable (e.g. batch_size=64; the module docstring lists them)."
# The options both learned multi-task generators take alike (typer reads an option's declaration, so one serves both)
QUALITY = typer.Option(
    "medium",
    help="medium (the checkpoint nearest the target plays) | replay (the training episodes up to it) | expert (the final policy plays).",
)
EPISODES = typer.Option(None, help="Episodes the acting policy plays per task (medium, expert; default 1000).")
TARGET_SUCCESS = typer.Option(None, help="medium, replay: the success the acting checkpoint is nearest (default 0.5).")
BAND = typer.Option(None, help="medium, replay: LOW HIGH; training stops at the first checkpoint reaching LOW (default 0.4 0.6).")
LEARNED_OUT = typer.Option(None, help=OUT_HELP)
LEARNED_ID = typer.Option(None, "--id", help=ID_HELP)
LEARNED_QUIET = typer.Option(False, help="No progress bar.")


def generate_minigrid_learned(
    suite: str = typer.Option("MT7", help="MT3 | MT5 | MT7 (MOORE's task lists)."),
    tasks: Optional[str] = typer.Option(None, help="Comma-separated MiniGrid ids (default: the suite's)."),
    quality: str = QUALITY,
    episodes: Optional[int] = EPISODES,
    timesteps: Optional[int] = typer.Option(None, help="The most PPO steps per task (default 2,097,152; all of them for expert)."),
    checkpoint_every: Optional[int] = typer.Option(None, help="PPO steps between checkpoints, a multiple of 1024 (default 16,384)."),
    eval_episodes: Optional[int] = typer.Option(None, help="Episodes that measure a checkpoint's success rate (default 50)."),
    target_success: Optional[float] = TARGET_SUCCESS,
    band: Optional[tuple[float, float]] = BAND,
    seed: int = typer.Option(0, help="Seeds PPO, its training layouts and every episode the data holds."),
    out: Optional[Path] = LEARNED_OUT,
    dataset_id: Optional[str] = LEARNED_ID,
    quiet: bool = LEARNED_QUIET,
) -> None:
    """MiniGrid multi-task data from a PPO agent per task, kept at checkpoints (medium, replay, expert). A task's
    finished training is kept under OFFBENCH_HOME and reused by the other qualities of the same run."""
    given = {
        "tasks": task_list(tasks) if tasks else None,
        "episodes_per_task": episodes,
        "timesteps": timesteps,
        "checkpoint_every": checkpoint_every,
        "eval_episodes": eval_episodes,
        **_band(target_success, band),
    }
    _generate_learned(
        "minigrid-learned", f"MiniGrid {suite} {quality} from a PPO agent per task", suite, quality, given, seed, out, dataset_id, quiet
    )


def generate_metaworld_learned(
    suite: str = typer.Option("MT10", help="MT10 | MT50 (Meta-World's task lists)."),
    tasks: Optional[str] = typer.Option(None, help="Comma-separated Meta-World task names (default: the suite's)."),
    quality: str = QUALITY,
    episodes: Optional[int] = EPISODES,
    timesteps: Optional[int] = typer.Option(None, help="The most SAC steps per task (default 300,000; all of them for expert)."),
    checkpoint_every: Optional[int] = typer.Option(None, help="SAC steps between checkpoints (default 10,000)."),
    eval_episodes: Optional[int] = typer.Option(None, help="Episodes that measure a checkpoint's success rate (default 10)."),
    learning_starts: Optional[int] = typer.Option(None, help="Uniformly random actions before SAC learns (default 10,000)."),
    max_episode_steps: Optional[int] = typer.Option(None, help="Steps per episode (default Meta-World's 500)."),
    target_success: Optional[float] = TARGET_SUCCESS,
    band: Optional[tuple[float, float]] = BAND,
    seed: int = typer.Option(0, help="Seeds SAC, the goals (metaworld.MT10(seed)) and every episode the data holds."),
    out: Optional[Path] = LEARNED_OUT,
    dataset_id: Optional[str] = LEARNED_ID,
    quiet: bool = LEARNED_QUIET,
) -> None:
    """Meta-World multi-task data from a SAC agent per task, kept at checkpoints (medium, replay, expert). A task's
    finished training is kept under OFFBENCH_HOME and reused by the other qualities of the same run."""
    given = {
        "tasks": task_list(tasks) if tasks else None,
        "episodes_per_task": episodes,
        "timesteps": timesteps,
        "checkpoint_every": checkpoint_every,
        "eval_episodes": eval_episodes,
        "learning_starts": learning_starts,
        "max_episode_steps": max_episode_steps,
        **_band(target_success, band),
    }
    _generate_learned(
        "metaworld-learned", f"Meta-World {suite} {quality} from a SAC agent per task", suite, quality, given, seed, out, dataset_id, quiet
    )


def _band(target_success: float | None, band: tuple[float, float] | None) -> dict[str, Any]:
    return {"target_success": target_success, "band": list(band) if band else None}


def _generate_learned(
    generator: str,
    description: str,
    suite: str,
    quality: str,
    given: dict[str, Any],
    seed: int,
    out: Path | None,
    dataset_id: str | None,
    quiet: bool,
) -> None:
    """Write and register a learned multi-task generator's data (options left out take the recipe's defaults), then
    print each task's acting checkpoint."""
    if quality == "expert" and (given["target_success"] is not None or given["band"] is not None):
        raise OffbenchError("--target-success and --band apply to medium and replay; expert trains all its timesteps")
    params = {"suite": suite, "quality": quality, **{key: value for key, value in given.items() if value is not None}}

    def canonical_params(params: dict[str, Any]) -> dict[str, Any]:
        """A recipe's params with every default filled in (two recipes that make the same data compare equal)."""
        from offbench.records import to_dict

        return to_dict(learned_recipe(generator)(params, seed).params)

    made = write_generated(
        generator,
        params,
        seed,
        out,
        dataset_id,
        quiet,
        new_card={
            "id": hashed_id(generator, [suite.lower(), quality], canonical_params(params), seed),
            "description": f"{description} (offbench generate {generator}), seed {seed}",
            "kind": "multi-task",
        },
        recorded=("env", "quality", "episodes_per_task", "behaviour", "behaviour_profiles", "checkpoints", "task_stats"),
        same_params=canonical_params,
    )
    print_task_table(made, lambda name: _checkpoint_columns(made.store.card["checkpoints"][name]))


def learned_recipe(generator: str):
    """The generator's recipe function (params, seed) -> LearnedRecipe."""
    if generator == "metaworld-learned":
        from offbench.generators.metaworld_learned import learned_recipe
    else:
        from offbench.generators.minigrid_learned import learned_recipe
    return learned_recipe


def _checkpoint_columns(record: dict[str, Any]) -> dict[str, str]:
    """The acting checkpoint: its steps, its success and (medium, replay) whether that is in the band."""
    acting = record["acting"]
    columns = {"acting (success)": f"{record['timesteps'][acting]:,} ({record['success'][acting]:.2f})"}
    if "in_band" in record:
        columns["in band"] = "yes" if record["in_band"] else "no"
    return columns


def generate_mujoco_local(
    env_id: str = typer.Option("Hopper-v4", help="Hopper-v4 | HalfCheetah-v4 | Walker2d-v4 (the v4 models D4RL's cards evaluate on)."),
    level: str = typer.Option("medium", help="medium | medium-replay | medium-expert | expert (D4RL's)."),
    train_steps: int = typer.Option(1_000_000, help="SAC environment steps; the best checkpoint is the expert."),
    checkpoint_every: int = typer.Option(10_000, help="Steps between checkpoints (the candidates for the medium policy)."),
    transitions: Optional[int] = typer.Option(
        None, help="Steps rolled out per policy (default 1,000,000; medium-expert has twice as many)."
    ),
    medium_fraction: Optional[float] = typer.Option(None, help="The medium policy's return as a fraction of the expert's (default 1/3)."),
    max_episode_steps: Optional[int] = typer.Option(None, help="The time limit (default D4RL's 1000)."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    seed: int = typer.Option(0, help="Seeds SAC and the rollouts."),
    out: Optional[Path] = typer.Option(None, help=OUT_HELP),
    dataset_id: Optional[str] = typer.Option(None, "--id", help=ID_HELP),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """D4RL-style locomotion data from a Soft Actor-Critic run made here. The run is kept under OFFBENCH_HOME and
    shared by the four levels of one environment, seed and training settings: the second level only rolls out."""
    from offbench.training.config import parse_override

    given = {"transitions": transitions, "medium_fraction": medium_fraction, "max_episode_steps": max_episode_steps}
    params: dict[str, Any] = {
        "env_id": env_id,
        "level": level,
        "train_steps": train_steps,
        "checkpoint_every": checkpoint_every,
        **{key: value for key, value in given.items() if value is not None},
    }
    for text in set_:
        name, value = parse_override(text)
        if name in params or name in given:
            raise OffbenchError(f"--set {text!r}: {name} has its own option, --{name.replace('_', '-')}")
        params[name] = value
    canonical = _mujoco_params(params)
    made = write_generated(
        "mujoco-local",
        params,
        seed,
        out,
        dataset_id,
        quiet,
        new_card={
            "id": hashed_id("mujoco-local", [env_id.split("-")[0].lower(), level], canonical, seed),
            "description": f"D4RL-style {env_id} {level} from a SAC run made here (offbench generate mujoco-local), seed {seed}",
            "kind": "offline",
            "env": {"id": env_id, "suite": "gymnasium", "kwargs": {"max_episode_steps": canonical["max_episode_steps"]}},
        },
        recorded=("scores", "mujoco_local"),
        same_params=_mujoco_params,
    )
    print_run_summary(made)


def _mujoco_params(params: dict[str, Any]) -> dict[str, Any]:
    """A recipe's params with every default filled in (two recipes that make the same data compare equal)."""
    from offbench.generators.mujoco_local import MujocoLocalRecipe
    from offbench.records import from_dict, to_dict

    return to_dict(from_dict(MujocoLocalRecipe, params, "mujoco-local recipe params"))


def print_run_summary(made: Generated) -> None:
    """The data's mean episode return and score, the policies that acted, and where it went."""
    import numpy as np
    from rich.console import Console

    store, card = made.store, made.store.card
    returns = np.add.reduceat(np.asarray(store.rewards, dtype=np.float64), store.episode_starts[:-1])
    scores, run = card["scores"], card["mujoco_local"]
    console = Console(soft_wrap=True)
    console.print(
        f"mean episode return {returns.mean():.1f} (normalised {made.card.normalise(returns.mean()):.1f}: random "
        f"{scores['ref_min']:.1f}, expert {scores['ref_max']:.1f}); medium policy at step {run['medium_step']:,} "
        f"(return {run['medium_return']:.1f}), expert at step {run['expert_step']:,} (return {run['expert_return']:.1f})",
        highlight=False,
    )
    console.print(written(made), highlight=False)


def hashed_id(generator: str, names: list[str], params: dict[str, Any], seed: int) -> str:
    """`generated/<generator>-<names>-<hash of the full params>-s<seed>`: readable, and different whenever the data is."""
    import json

    digest = zlib.crc32(json.dumps(params, sort_keys=True).encode())
    return "generated/" + "-".join([generator, *names, f"{digest:08x}"]) + f"-s{seed}"
