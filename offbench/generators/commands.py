"""`offbench generate <benchmark>`: learning-history datasets from the command line, one sub-command per
in-context RL benchmark: the tabular ones (darkroom, darkroom-hard, keydoor, bandit, bandit-gaussian;
offbench.generators.histories) and the contextual bandits (contextual-bandit, contextual-bandit-headless;
offbench.generators.contextual).

The data goes to $OFFBENCH_HOME/data/<id>/data.h5 and its card to $OFFBENCH_HOME/datasets/<id>.toml, which
registers it (`offbench info <id>`, `offbench.load("<id>")`). With --out DIR both go to DIR (data.h5 and
card.toml) and nothing is registered: open it by path. The card holds the recipe, so the data can be
regenerated bit for bit.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from offbench.envs.benchmarks import BENCHMARKS, CONTEXTUAL_BENCHMARKS, Benchmark
from offbench.errors import OffbenchError


def add_history_commands(generate_app: typer.Typer) -> None:
    """Register one `offbench generate <name>` sub-command per benchmark, tabular and contextual."""
    for bench in BENCHMARKS.values():
        generate_app.command(bench.name, help=f"{bench.summary}: learning histories.")(_command(bench))
    for bench in CONTEXTUAL_BENCHMARKS.values():
        generate_app.command(bench.name, help=f"{bench.summary}: LinUCB or linear Thompson sampling histories.")(_command(bench))


def _command(bench: Benchmark):
    """A Typer command for one benchmark; its options are built from the benchmark (algorithms, defaults). The
    contextual generator takes no --workers: it runs every history in one batch."""

    def command(**options: Any) -> None:
        counts = options.pop("num_arms", None)
        if counts:  # one count, or a list of them: the recipe's num_arms (a repeated --num-arms)
            options["num_arms"] = counts[0] if len(counts) == 1 else counts
        generate_and_register(bench.name, **options)

    def option(name: str, annotation: Any, default: Any, help: str, *flags: str) -> inspect.Parameter:
        flag = "--" + name.replace("_", "-")
        info = typer.Option(default, flag, *flags, help=help, show_default=default is not ...)
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)

    contextual = bench.name in CONTEXTUAL_BENCHMARKS
    episodes = "pulls per learning history (each pull is a one-step episode)" if contextual else "episodes per learning history"
    example = "alpha=0.3" if contextual else "per_episode_schedule=true"
    params = [
        option("algo", str, bench.algos[0], f"source algorithm: {', '.join(bench.algos)}"),
        option("tasks", int, ..., "tasks drawn from the benchmark's task space: training + held-out"),
        option("held_out", int, 0, "how many of those tasks are held out for evaluation (no histories)"),
        option("histories_per_task", int, 1, "learning histories per training task (different random streams)"),
        option("episodes", int, bench.default_episodes, episodes),
        option("seed", int, 0, "seed of the source algorithm and environment randomness"),
        option("split_seed", int, 0, "seed of the train / held-out task split"),
        option("set", list[str], [], f"source-algorithm hyper-parameter NAME=VALUE, repeatable (e.g. {example})"),
    ]
    if bench.variants:
        params.append(option("variant", str, bench.variants[0], f"task distribution: {', '.join(bench.variants)}"))
    if not contextual and "num_arms" in bench.split_kwargs:
        arms = bench.split_kwargs["num_arms"]
        params += [
            option(
                "num_arms",
                list[int],
                [],
                f"arms of the training tasks (default {arms}); repeat it for tasks of several counts: one consecutive run of "
                "training tasks per count, and the data gets a num_actions column (for Headless-AD)",
            ),
            option(
                "held_out_arms",
                Optional[int],
                None,
                "arms of the held-out tasks (default: the training tasks' count, the largest of several)",
            ),
        ]
    params += [
        option("out", Optional[Path], None, "write data.h5 and card.toml into this folder instead of registering"),
        option("allow_unlearned", bool, False, "keep the data even if most histories did not improve"),
    ]
    if not contextual:
        params.append(
            option("workers", Optional[int], None, "processes to generate with (default: every core); the data is the same for any number")
        )
    params.append(option("quiet", bool, False, "no progress bar", "-q"))
    command.__signature__ = inspect.Signature(params)
    command.__name__ = bench.name.replace("-", "_")
    return command


@dataclass(frozen=True)
class GenerationPlan:
    """One validated recipe, before any work: the dataset's id, how to write its data, and the console line that
    reports the written card's `learning`."""

    dataset_id: str
    write: Callable[[Path], Path]
    report: Callable[[dict[str, Any]], str]


def _tabular_plan(benchmark: str, params: dict[str, Any], seed: int, quiet: bool, workers: int | None) -> GenerationPlan:
    from offbench.generators.histories import HistoryRecipe, generate

    recipe = HistoryRecipe.from_params(benchmark, params)
    if workers is not None and workers < 1:
        raise OffbenchError(f"--workers must be at least 1 (got {workers})")

    def report(learning: dict[str, Any]) -> str:
        if not recipe.source_learns:
            return f"{recipe.algo} is a roll-in, not a learner: no learning to report"
        return (
            f"learning ({learning['score']}, first vs last {learning['window_episodes']} episodes): "
            f"{learning['first_return']:.3f} -> {learning['last_return']:.3f} of optimum {learning['optimal_return']:.3f}; "
            f"{learning['histories_improved']}/{learning['histories']} histories improved"
        )

    return GenerationPlan(
        recipe.dataset_id(seed), lambda path: generate(benchmark, recipe.to_params(), seed, path, quiet=quiet, workers=workers), report
    )


def _contextual_plan(benchmark: str, params: dict[str, Any], seed: int, quiet: bool) -> GenerationPlan:
    from offbench.generators.contextual import dataset_id, generate, read_recipe
    from offbench.records import to_dict

    recipe, _ = read_recipe(benchmark, params)

    def report(learning: dict[str, Any]) -> str:
        return (
            f"learning (regret per pull, first vs last {learning['window_episodes']} pulls): "
            f"{learning['first_regret_per_pull']:.3f} -> {learning['last_regret_per_pull']:.3f} "
            f"(optimum {learning['optimal_return']:.3f} a pull); {learning['histories_improved']}/{learning['histories']} histories improved"
        )

    return GenerationPlan(
        dataset_id(benchmark, recipe, seed), lambda path: generate(benchmark, to_dict(recipe), seed, path, quiet=quiet), report
    )


def generate_and_register(benchmark: str, *, seed: int, out: Path | None, quiet: bool, workers: int | None = None, **params: Any) -> Path:
    """Validate (before any work), generate, write data and card; returns the data file's path."""
    from offbench.data.cards import card_from_dict, write_card
    from offbench.data.store import native_header, replace_card
    from offbench.machine import made_on
    from offbench.utils import check_writable

    overrides = params.pop("set", None) or []
    if overrides:
        from offbench.training.config import parse_override

        params["hyperparameters"] = dict(parse_override(text) for text in overrides)
    if seed < 0:
        raise OffbenchError(f"seed must be non-negative (got {seed})")
    plan = (
        _contextual_plan(benchmark, params, seed, quiet)
        if benchmark in CONTEXTUAL_BENCHMARKS
        else _tabular_plan(benchmark, params, seed, quiet, workers)
    )
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

        stub = card_from_dict(
            {"id": plan.dataset_id, "description": "", "format": "offbench", "source": {"recipe": {"generator": benchmark}}}
        )
        data_path, card_path = native_path(stub), user_cards_dir() / f"{plan.dataset_id}.toml"

    check_writable(data_path.parent)  # before the work, not after it
    plan.write(data_path)
    card, num_episodes, num_transitions = native_header(data_path)
    card["made_on"] = made_on()
    replace_card(data_path, card)
    write_card(card_from_dict(card, card_path), card_path)

    console = Console(soft_wrap=True)
    console.print(f"wrote {data_path}: {num_episodes:,} episodes, {num_transitions:,} transitions", highlight=False)
    console.print(plan.report(card["learning"]), highlight=False)
    if out is None:
        console.print(f"registered as {plan.dataset_id} (card {card_path})", highlight=False)
    else:
        console.print(f"card {card_path}; not registered: open it by path (offbench info {data_path})", highlight=False)
    return data_path
