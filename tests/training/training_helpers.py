"""Shared by the training tests (a plain module: conftest modules are not for importing)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"


def offbench_command(*args: str) -> list[str]:
    """argv for `offbench ARGS` in a subprocess."""
    return [sys.executable, "-m", "offbench", *map(str, args)]
