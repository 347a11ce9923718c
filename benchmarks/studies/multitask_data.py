"""How long does each multi-task data recipe take to generate, and how often do its behaviour policies succeed, per
task? Times the recipes and prints the per-task success and return.

    .venv/bin/python benchmarks/studies/multitask_data.py --metaworld-episodes 50 --minigrid-episodes 1000 --workers 2

Answer: benchmarks/studies/multitask-data.md.

Meta-World: collects MT10 near-optimal and noisy-expert with `--metaworld-episodes` per task (the full cards
use 1000; pass 1000 for the full figures), prints per-task success rate and mean return, and the core-seconds
per 500-step episode, from which the full recipes' times are estimated. MiniGrid: collects MT7 (whose tasks
include every MT3 and MT5 task, with the same episodes: seeds hash the task name) at both qualities.
The tiny test recipes are timed as they are (one process).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import typer

from offbench.data.cards import read_card
from offbench.data.store import load_native
from offbench.generators import get_generator

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.common import cli_help  # noqa: E402

REPO = Path(__file__).resolve().parents[2]  # the checkout
app = typer.Typer(add_completion=False)


def timed_generate(generator: str, params: dict, seed: int, out: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    path = get_generator(generator)(params, seed, out, True)
    return time.perf_counter() - start, load_native(path).card


def stats_table(cards: dict[str, dict]) -> str:
    """Markdown: per task (and the mean over tasks) success rate and mean return of each quality."""
    columns = {}
    for quality, card in cards.items():
        stats = pd.DataFrame(card["task_stats"]).T.loc[card["env"]["kwargs"]["tasks"]]
        columns[f"{quality} success"] = stats["success_rate"].astype(float)
        columns[f"{quality} return"] = stats["mean_return"].astype(float)
    table = pd.DataFrame(columns)
    table.loc["mean"] = table.mean()
    for column in table:
        digits = 2 if "success" in column else 1 if table[column].abs().max() >= 10 else 3
        table[column] = table[column].map(f"{{:.{digits}f}}".format)
    return table.to_markdown()


@app.command()
def main(
    metaworld_episodes: int = typer.Option(20, help="Episodes per MT10 task (full cards: 1000; 0: skip)."),
    minigrid_episodes: int = typer.Option(1000, help="Episodes per MiniGrid MT7 task (full cards: 1000; 0: skip)."),
    workers: int = typer.Option(2, help="Worker processes."),
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("## tiny test recipes (one process)")
        for card_id in (
            "metaworld/tiny-near-optimal",
            "metaworld/tiny-noisy-expert",
            "minigrid/tiny-near-optimal",
            "minigrid/tiny-noisy-planner",
        ):
            recipe = read_card(REPO / "datasets" / f"{card_id}.toml").source["recipe"]
            params = {**recipe["params"], "workers": 1}
            seconds, _ = timed_generate(recipe["generator"], params, recipe["seed"], root / card_id / "data.h5")
            print(f"{card_id}: {seconds:.1f} s")

        from offbench.envs.metaworld import task_goals

        start = time.perf_counter()
        task_goals("MT10", 0, "reach-v3")
        print(f"\nMT10(seed=0) goal draws: {time.perf_counter() - start:.1f} s (once per collection)")

        collections = (("MT10", "metaworld", metaworld_episodes, "noisy-expert"), ("MT7", "minigrid", minigrid_episodes, "noisy-planner"))
        for suite, generator, episodes, noisy in collections:
            if episodes == 0:
                continue
            cards, seconds = {}, {}
            for quality in ("near-optimal", noisy):
                params = {"suite": suite, "quality": quality, "episodes_per_task": episodes, "workers": workers}
                seconds[quality], cards[quality] = timed_generate(generator, params, 0, root / suite / quality / "data.h5")
            tasks = len(cards["near-optimal"]["env"]["kwargs"]["tasks"])
            print(f"\n## {suite}, {episodes} episodes per task, seed 0, {workers} workers")
            for quality, value in seconds.items():
                per_episode = value * workers / (episodes * tasks)
                print(f"{quality}: {value:.1f} s wall, {per_episode:.3f} core-s per episode")
            print(stats_table(cards))


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)  # --help: the question, the command and where the answer stands
    app()
