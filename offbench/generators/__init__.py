"""Dataset generators, behind a string-keyed registry so a card's recipe names the one that makes it.

A generator is a function `(params: dict, seed: int, out: Path, quiet: bool) -> Path` that writes a
native dataset file at `out` (atomically) and returns its path. Cards name it in `source.recipe`:

    [source.recipe]
    generator = "darkroom"
    seed = 0
    params = { tasks = 8, episodes = 100 }
"""

from __future__ import annotations

import importlib
from functools import partial
from pathlib import Path
from typing import Any, Callable

from offbench.registry import lookup, register

Generator = Callable[[dict[str, Any], int, Path, bool], Path]

GENERATORS: dict[str, Generator] = {}

# Modules that register generators when imported (kept lazy: some need optional extras).
_GENERATOR_MODULES: list[str] = [
    "offbench.generators.histories",
    "offbench.generators.contextual",
    "offbench.generators.pendulum",
    "offbench.generators.metaworld",
    "offbench.generators.minigrid",
    "offbench.generators.minigrid_learned",
    "offbench.generators.metaworld_learned",
    "offbench.generators.mujoco_local",
]


register_generator = partial(register, GENERATORS)  # @register_generator("name")


def get_generator(name: str) -> Generator:
    for module in _GENERATOR_MODULES:  # in order, only until the name is registered (the multi-task ones load pandas)
        if name in GENERATORS:
            break
        importlib.import_module(module)
    return lookup(GENERATORS, name, "generator")


def generate_from_card(card, out: Path, quiet: bool = False) -> Path:
    """Generate the dataset a recipe card describes (used on first `offbench.load` of its id). Where a leaderboard
    pins the kernels its copy was made on and this machine can reach them, the generation runs on those kernels, in
    a child process (`pinned_kernels`), so it makes the pinned bytes."""
    import os
    import sys

    from offbench.data.store import native_header, replace_card
    from offbench.generators.pinned_kernels import generate_in_child, reachable_pin
    from offbench.leaderboard.spec import made_elsewhere
    from offbench.machine import made_on
    from offbench.utils import check_writable

    recipe = card.source.recipe
    generator = get_generator(recipe.generator)
    check_writable(out.parent)  # before the work, not after it
    pin = reachable_pin(card.id)
    if pin is not None:
        board, variables = pin
        setting = " ".join(f"{name}={value}" for name, value in variables.items())
        print(f"offbench: generating {card.id} on the SIMD kernels leaderboard '{board}' pins for it ({setting})", file=sys.stderr)
        return generate_in_child(card, out, quiet, variables)
    for line in made_elsewhere(card.id):
        print(f"offbench: warning: {line}", file=sys.stderr)
    staging = out.with_name(f".{out.name}.generating")
    try:
        generator(dict(recipe.params), recipe.seed, staging, quiet)
        # The file carries the registered card (its id, description, scores) plus what the generator measured and
        # where (`made_on`); only that attribute changes, so the arrays are not written a second time.
        replace_card(staging, {**native_header(staging)[0], **card.to_dict(), "made_on": made_on()})
        os.replace(staging, out)
        return out
    finally:
        staging.unlink(missing_ok=True)
