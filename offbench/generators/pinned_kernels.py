"""Generate a recipe card's dataset on the SIMD kernels a leaderboard pins for it, where this machine can reach them.

Data that a learner trains into existence (SAC, PPO) repeats bit for bit only on the kernels it was made on, and a
board refuses runs on other bytes. A CPU with more instruction sets than the pinned machine's can still dispatch to
its kernels: torch, NumPy and OpenBLAS read variables for that (`offbench.machine.kernel_variables`), but only when
they load, so the generation runs in a child process started with them. The child records the kernels it ran on in
the card's `made_on`, as every generation does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def reachable_pin(dataset_id: str) -> tuple[str, dict[str, str]] | None:
    """(benchmark, variables) for the first benchmark whose pinned kernels for `dataset_id` differ from this
    machine's and that a child process can reach; None where none needs or allows it, or inside such a child."""
    from offbench.leaderboard.spec import pinned_kernels
    from offbench.machine import kernel_variables
    from offbench.utils import in_lowered_child

    if in_lowered_child():
        return None
    for name, made in pinned_kernels(dataset_id):
        variables = kernel_variables(made)
        if variables == {}:
            return None  # a board's pin is this machine's own kernels: generate here
        if variables:
            return name, variables
    return None


def generate_in_child(card: Any, out: Path, quiet: bool, variables: dict[str, str]) -> Path:
    """Run `generate_from_card(card, out)` in a fresh Python with `variables` set (`python -m offbench.generators`);
    its error, if any, as this process's one-line error."""
    from offbench.utils import call_on_kernels

    call_on_kernels("offbench.generators", [json.dumps(card.to_dict()), str(out), "quiet" if quiet else "loud"], variables)
    return out
