"""`offbench generate metaworld|minigrid`: collect a multi-task dataset and register (or write) its card."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from offbench.envs.metaworld import MAX_PATH_LENGTH
from offbench.errors import OffbenchError

QUALITY_HELP = "near-optimal | sub-optimal | mixed (a coin per episode between the two)."
WORKERS_HELP = "Worker processes (0: all cores). Does not change the data."
OUT_HELP = "Write DIR/data.h5 and DIR/card.toml here instead of registering the dataset under OFFBENCH_HOME."


def generate_metaworld(
    suite: str = typer.Option("MT10", help="MT10 | MT50 (their goal draws), or MT1 (any tasks, each drawn alone)."),
    quality: str = typer.Option("near-optimal", help=QUALITY_HELP),
    episodes: int = typer.Option(1000, help="Episodes per task."),
    tasks: Optional[str] = typer.Option(None, help="Comma-separated task names (default: all of the suite's)."),
    seed: int = typer.Option(0, help="Seeds the goal draws and every episode's goal and noise."),
    max_episode_steps: int = typer.Option(MAX_PATH_LENGTH, help=f"Episode length (Meta-World's horizon is {MAX_PATH_LENGTH})."),
    workers: int = typer.Option(0, help=WORKERS_HELP),
    out: Optional[Path] = typer.Option(None, help=OUT_HELP),
    dataset_id: Optional[str] = typer.Option(None, "--id", help="Dataset id (default: derived from the options)."),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """Meta-World multi-task data from the scripted expert policies plus action noise."""
    params: dict[str, Any] = {"suite": suite, "quality": quality, "episodes_per_task": episodes}
    if tasks:
        params["tasks"] = _task_list(tasks)
    if max_episode_steps != MAX_PATH_LENGTH:
        params["max_episode_steps"] = max_episode_steps
    _generate("metaworld", params, seed, workers, out, dataset_id, quiet)


def generate_minigrid(
    suite: str = typer.Option("MT7", help="MT3 | MT5 | MT7 (MOORE's task lists)."),
    quality: str = typer.Option("near-optimal", help=QUALITY_HELP),
    episodes: int = typer.Option(1000, help="Episodes per task."),
    tasks: Optional[str] = typer.Option(None, help="Comma-separated MiniGrid ids (default: the suite's)."),
    seed: int = typer.Option(0, help="Seeds every episode's layout and noise."),
    observation: str = typer.Option("flat", help="flat (view image flattened + direction) | image (7x7x3 view)."),
    workers: int = typer.Option(0, help=WORKERS_HELP),
    out: Optional[Path] = typer.Option(None, help=OUT_HELP),
    dataset_id: Optional[str] = typer.Option(None, "--id", help="Dataset id (default: derived from the options)."),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """MiniGrid multi-task data from a shortest-path planner on the full grid, plus random actions."""
    params: dict[str, Any] = {"suite": suite, "quality": quality, "episodes_per_task": episodes}
    if tasks:
        params["tasks"] = _task_list(tasks)
    if observation != "flat":
        params["observation"] = observation
    _generate("minigrid", params, seed, workers, out, dataset_id, quiet)


def _task_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def default_id(generator: str, params: dict[str, Any], seed: int) -> str:
    """A readable id that differs whenever the data would, in the learning histories' style (names, then
    letter-prefixed sizes, the seed last): generator, suite, quality, observation, episodes per task, horizon,
    a task subset (its count and a hash of its names)."""
    import zlib

    parts = [generator, params["suite"].lower(), params["quality"]]
    if "observation" in params:
        parts.append(params["observation"])
    parts.append(f"e{params['episodes_per_task']}")
    if "max_episode_steps" in params:
        parts.append(f"steps{params['max_episode_steps']}")
    if "tasks" in params:
        parts += [f"t{len(params['tasks'])}", f"{zlib.crc32(','.join(params['tasks']).encode()):08x}"]
    return "generated/" + "-".join(parts) + f"-s{seed}"


def _generate(
    generator: str, params: dict[str, Any], seed: int, workers: int, out: Path | None, dataset_id: str | None, quiet: bool
) -> None:
    from rich.console import Console
    from rich.table import Table

    from offbench.data.cards import SourceRecipe, all_cards, card_from_dict, write_card
    from offbench.data.resolve import native_path
    from offbench.data.store import load_native, replace_card
    from offbench.generators import get_generator
    from offbench.paths import user_cards_dir
    from offbench.utils import check_writable

    if workers < 0:
        raise OffbenchError(f"--workers must be 0 (all cores) or more, got {workers}")
    recipe = {"generator": generator, "seed": seed, "params": params}
    registered = None
    if dataset_id is None and out is None:  # the recipe of a registered card: fill that card's dataset
        wanted = SourceRecipe(generator=generator, seed=seed, params=params)
        registered = next((card for card in all_cards().values() if card.source.recipe == wanted), None)
    card_data = (
        registered.to_dict()
        if registered
        else {
            "id": dataset_id or default_id(generator, params, seed),
            "description": (
                f"{generator} {params['suite']} {params['quality']}, {params['episodes_per_task']} episodes per task, seed {seed}"
            ),
            "format": "offbench",
            "kind": "multi-task",
            "source": {"recipe": recipe},
        }
    )
    card = card_from_dict(card_data)
    target = Path(out) / "data.h5" if out else native_path(card)
    check_writable(target.parent)  # before the work, not after it
    path = get_generator(generator)({**params, "workers": workers}, seed, target, quiet)
    store = load_native(path)
    recorded = ("env", "quality", "behaviour", "behaviour_profiles", "task_stats")
    card = card_from_dict({**card_data, **{key: store.card[key] for key in recorded}})
    replace_card(path, {**store.card, **card.to_dict()})  # the file names its dataset (exports are named from it)
    card_path = write_card(card, Path(out) / "card.toml" if out else user_cards_dir() / f"{card.id}.toml")

    console = Console()
    table = Table("task", "episodes", "success rate", "mean return", box=None, header_style="bold")
    for name in store.card["env"]["kwargs"]["tasks"]:
        stats = store.card["task_stats"][name]
        table.add_row(name, str(stats["episodes"]), f"{stats['success_rate']:.3f}", f"{stats['mean_return']:.2f}")
    console.print(table)
    console.print(f"{card.id}: {path} ({store.num_episodes:,} episodes, {store.num_transitions:,} steps); card {card_path}")
