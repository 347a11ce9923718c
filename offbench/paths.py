"""Where offbench keeps things: OFFBENCH_HOME for data and user cards, the repository for built-in cards."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def offbench_home() -> Path:
    """Root for downloaded and generated data and user cards (`$OFFBENCH_HOME`, default `~/.offbench`)."""
    return Path(os.environ.get("OFFBENCH_HOME", Path.home() / ".offbench")).expanduser()


def data_dir(dataset_id: str) -> Path:
    """Local folder of one dataset id (ids may contain '/', which become sub-folders)."""
    return offbench_home() / "data" / dataset_id


def work_root() -> Path:
    """$OFFBENCH_HOME/work: the generators' `work_dir`s (`offbench cache` lists and deletes them)."""
    return offbench_home() / "work"


def work_dir(generator: str) -> Path:
    """Where a generator keeps work that outlives one dataset, for other recipes to reuse (training runs):
    $OFFBENCH_HOME/work/<generator>."""
    return work_root() / generator


def user_cards_dir() -> Path:
    return offbench_home() / "datasets"


def builtin_dir(name: str) -> Path:
    """A top-level data folder (`datasets`, `baselines`, `leaderboards`): the checkout's, else the wheel's copy."""
    checkout = _PACKAGE_DIR.parent / name
    if checkout.is_dir():
        return checkout
    return _PACKAGE_DIR / "_builtin" / name
