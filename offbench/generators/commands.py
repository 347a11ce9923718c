"""`offbench generate <benchmark>`: learning-history datasets from the command line, one sub-command per
in-context RL benchmark (darkroom, darkroom-hard, keydoor, bandit, bandit-gaussian).

The data goes to $OFFBENCH_HOME/data/<id>/data.h5 and its card to $OFFBENCH_HOME/datasets/<id>.toml, which
registers it (`offbench info <id>`, `offbench.load("<id>")`). With --out DIR both go to DIR (data.h5 and
card.toml) and nothing is registered: open it by path. The card holds the recipe, so the data can be
regenerated bit for bit.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from offbench.envs.benchmarks import BENCHMARKS, Benchmark
from offbench.errors import OffbenchError


def add_history_commands(generate_app: typer.Typer) -> None:
    """Register one `offbench generate <name>` sub-command per benchmark."""
    for bench in BENCHMARKS.values():
        generate_app.command(bench.name, help=f"{bench.summary}: learning histories.")(_command(bench))


def _command(bench: Benchmark):
    """A Typer command for one benchmark; its options are built from the benchmark (algorithms, defaults)."""

    def command(**options: Any) -> None:
        generate_and_register(bench.name, **options)

    def option(name: str, annotation: Any, default: Any, help: str, *flags: str) -> inspect.Parameter:
        flag = "--" + name.replace("_", "-")
        info = typer.Option(default, flag, *flags, help=help, show_default=default is not ...)
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)

    params = [
        option("algo", str, bench.algos[0], f"source algorithm: {', '.join(bench.algos)}"),
        option("tasks", int, ..., "tasks drawn from the benchmark's task space: training + held-out"),
        option("held_out", int, 0, "how many of those tasks are held out for evaluation (no histories)"),
        option("histories_per_task", int, 1, "learning histories per training task (different random streams)"),
        option("episodes", int, bench.default_episodes, "episodes per learning history"),
        option("seed", int, 0, "seed of the source algorithm and environment randomness"),
        option("split_seed", int, 0, "seed of the train / held-out task split"),
        option("set", list[str], [], "source-algorithm hyper-parameter NAME=VALUE, repeatable (e.g. per_episode_schedule=true)"),
    ]
    if bench.variants:
        params.append(option("variant", str, bench.variants[0], f"task distribution: {', '.join(bench.variants)}"))
    params += [
        option("out", Optional[Path], None, "write data.h5 and card.toml into this folder instead of registering"),
        option("allow_unlearned", bool, False, "keep the data even if most histories did not improve"),
        option("workers", Optional[int], None, "processes to generate with (default: every core); the data is the same for any number"),
        option("quiet", bool, False, "no progress bar", "-q"),
    ]
    command.__signature__ = inspect.Signature(params)
    command.__name__ = bench.name.replace("-", "_")
    return command


def generate_and_register(benchmark: str, *, seed: int, out: Path | None, quiet: bool, workers: int | None = None, **params: Any) -> Path:
    """Validate (before any work), generate, write data and card; returns the data file's path."""
    from offbench.data.cards import card_from_dict, write_card
    from offbench.data.store import native_header
    from offbench.generators.histories import HistoryRecipe, generate
    from offbench.utils import check_writable

    overrides = params.pop("set", None) or []
    if overrides:
        from offbench.training.config import parse_override

        params["hyperparameters"] = dict(parse_override(text) for text in overrides)
    recipe = HistoryRecipe.from_params(benchmark, params)
    if seed < 0:
        raise OffbenchError(f"seed must be non-negative (got {seed})")
    dataset_id = recipe.dataset_id(seed)
    if out is not None:
        if out.exists() and not out.is_dir():
            raise OffbenchError(f"{out}: --out must be a folder (it is a file)")
        data_path, card_path = out / "data.h5", out / "card.toml"
        for existing in (data_path, card_path):
            if existing.exists():
                raise OffbenchError(f"{existing}: already exists; remove it or choose another --out")
    else:
        from offbench.data.resolve import native_path
        from offbench.paths import user_cards_dir

        stub = card_from_dict({"id": dataset_id, "description": "", "format": "offbench", "source": {"recipe": {"generator": benchmark}}})
        data_path, card_path = native_path(stub), user_cards_dir() / f"{dataset_id}.toml"

    check_writable(data_path.parent)  # before the work, not after it
    if workers is not None and workers < 1:
        raise OffbenchError(f"--workers must be at least 1 (got {workers})")
    generate(benchmark, recipe.to_params(), seed, data_path, quiet=quiet, workers=workers)
    card, num_episodes, num_transitions = native_header(data_path)
    write_card(card_from_dict(card, card_path), card_path)

    learning = card["learning"]
    console = Console(soft_wrap=True)
    console.print(f"wrote {data_path}: {num_episodes:,} episodes, {num_transitions:,} transitions", highlight=False)
    if recipe.source_learns:
        console.print(
            f"learning ({learning['score']}, first vs last {learning['window_episodes']} episodes): "
            f"{learning['first_return']:.3f} -> {learning['last_return']:.3f} of optimum {learning['optimal_return']:.3f}; "
            f"{learning['histories_improved']}/{learning['histories']} histories improved",
            highlight=False,
        )
    else:
        console.print(f"{recipe.algo} is a roll-in, not a learner: no learning to report", highlight=False)
    if out is None:
        console.print(f"registered as {dataset_id} (card {card_path})", highlight=False)
    else:
        console.print(f"card {card_path}; not registered: open it by path (offbench info {data_path})", highlight=False)
    return data_path
