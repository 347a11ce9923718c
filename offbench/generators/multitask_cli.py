"""`offbench generate metaworld|minigrid`: collect a multi-task dataset and register (or write) its card."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from offbench.envs.metaworld import MAX_PATH_LENGTH
from offbench.errors import OffbenchError

if TYPE_CHECKING:  # the command's options load light; the data layer when a command runs
    from offbench.data.cards import DatasetCard
    from offbench.data.store import EpisodeStore

QUALITY_HELP = "near-optimal | {noisy} | mixed (a coin per episode between the two)."  # each generator names its noisy profile
WORKERS_HELP = "Worker processes (0: all cores). Does not change the data."
OUT_HELP = "Write DIR/data.h5 and DIR/card.toml here instead of registering the dataset under OFFBENCH_HOME."


def generate_metaworld(
    suite: str = typer.Option("MT10", help="MT10 | MT50 (their goal draws), or MT1 (any tasks, each drawn alone)."),
    quality: str = typer.Option("near-optimal", help=QUALITY_HELP.format(noisy="noisy-expert")),
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
        params["tasks"] = task_list(tasks)
    if max_episode_steps != MAX_PATH_LENGTH:
        params["max_episode_steps"] = max_episode_steps
    _generate("metaworld", params, seed, workers, out, dataset_id, quiet)


def generate_minigrid(
    suite: str = typer.Option("MT7", help="MT3 | MT5 | MT7 (MOORE's task lists)."),
    quality: str = typer.Option("near-optimal", help=QUALITY_HELP.format(noisy="noisy-planner")),
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
        params["tasks"] = task_list(tasks)
    if observation != "flat":
        params["observation"] = observation
    _generate("minigrid", params, seed, workers, out, dataset_id, quiet)


def task_list(text: str) -> list[str]:
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
    if workers < 0:
        raise OffbenchError(f"--workers must be 0 (all cores) or more, got {workers}")
    made = write_generated(
        generator,
        params,
        seed,
        out,
        dataset_id,
        quiet,
        new_card={
            "id": default_id(generator, params, seed),
            "description": f"{generator} {params['suite']} {params['quality']}, {params['episodes_per_task']} episodes per task, seed {seed}",
            "kind": "multi-task",
        },
        recorded=("env", "quality", "behaviour", "behaviour_profiles", "task_stats"),
        run_params={**params, "workers": workers},
    )
    print_task_table(made)


@dataclass(frozen=True)
class Generated:
    """What `write_generated` made: the card (a registered one filled, or a new one), the data, and both paths."""

    card: DatasetCard
    store: EpisodeStore
    path: Path
    card_path: Path


def write_generated(
    generator: str,
    params: dict[str, Any],
    seed: int,
    out: Path | None,
    dataset_id: str | None,
    quiet: bool,
    *,
    new_card: dict[str, Any],
    recorded: tuple[str, ...],
    run_params: dict[str, Any] | None = None,
    same_params: Callable[[dict[str, Any]], Any] = dict,
) -> Generated:
    """Run the generator on `params` (or `run_params`, which may add options that do not change the data) and write
    the data with a card holding the recipe and the keys of the file's own card named in `recorded` (what the
    generator measured). Without --out and --id, a registered card of this recipe (its params equal to these after
    `same_params`, which may fill in defaults) gets its dataset filled; otherwise the card is `new_card` (id,
    description, kind, env), named `dataset_id` if given, registered under OFFBENCH_HOME or with --out written
    beside the data."""
    from offbench.data.cards import all_cards, card_from_dict, write_card
    from offbench.data.resolve import native_path
    from offbench.data.store import load_native, replace_card
    from offbench.generators import get_generator
    from offbench.machine import made_on
    from offbench.paths import user_cards_dir
    from offbench.utils import check_writable

    registered = None
    if dataset_id is None and out is None:
        wanted = same_params(params)
        registered = next((card for card in all_cards().values() if _made_by(card, generator, seed, wanted, same_params)), None)
    card_data = (
        registered.to_dict()
        if registered
        else {
            **new_card,
            "id": dataset_id or new_card["id"],
            "format": "offbench",
            "source": {"recipe": {"generator": generator, "seed": seed, "params": params}},
        }
    )
    card = card_from_dict(card_data)
    target = Path(out) / "data.h5" if out else native_path(card)
    check_writable(target.parent)  # before the work, not after it
    path = get_generator(generator)(run_params or params, seed, target, quiet)
    store = load_native(path)
    card = card_from_dict({**card_data, **{key: store.card[key] for key in recorded if key in store.card}})
    # the file names its dataset (exports are named from it) and the machine that made it
    replace_card(path, {**store.card, **card.to_dict(), "made_on": made_on()})
    card_path = write_card(card, Path(out) / "card.toml" if out else user_cards_dir() / f"{card.id}.toml")
    return Generated(card, store, path, card_path)


def _made_by(card: DatasetCard, generator: str, seed: int, wanted: Any, same_params: Callable[[dict[str, Any]], Any]) -> bool:
    """Whether a registered card's recipe is this generator's with this seed and these params (a card whose params
    the generator would refuse is no match)."""
    recipe = card.source.recipe
    if recipe is None or recipe.generator != generator or recipe.seed != seed:
        return False
    try:
        return same_params(dict(recipe.params)) == wanted
    except OffbenchError:
        return False


def print_task_table(made: Generated, columns: Callable[[str], dict[str, str]] | None = None) -> None:
    """Per task: episodes, success rate, mean return (and the generator's own `columns`); then where the data went."""
    from rich.console import Console
    from rich.table import Table

    card = made.store.card
    names = card["env"]["kwargs"]["tasks"]
    extra = {name: (columns(name) if columns else {}) for name in names}
    headers = list(next(iter(extra.values()), {}))
    table = Table("task", "episodes", "success rate", "mean return", *headers, box=None, header_style="bold")
    for name in names:
        stats = card["task_stats"][name]
        table.add_row(name, str(stats["episodes"]), f"{stats['success_rate']:.3f}", f"{stats['mean_return']:.2f}", *extra[name].values())
    console = Console()
    console.print(table)
    console.print(written(made), soft_wrap=True, highlight=False)  # a path broken over lines cannot be copied


def written(made: Generated) -> str:
    """Where the data and its card went."""
    store = made.store
    return f"{made.card.id}: {made.path} ({store.num_episodes:,} episodes, {store.num_transitions:,} steps); card {made.card_path}"
