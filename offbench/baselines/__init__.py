"""String-keyed registry of baselines: name -> module, imported only when that baseline is used.

Each module defines one class meeting `offbench.baselines.base.Baseline` whose `name` equals its key
here (and a `Config` dataclass on it). Add a baseline with one line below.
"""

from __future__ import annotations

import importlib

from offbench.errors import OffbenchError

BASELINES: dict[str, str] = {
    "bc": "offbench.baselines.bc",
    "dt": "offbench.baselines.dt",
    "cql": "offbench.baselines.cql",
    "iql": "offbench.baselines.iql",
    "moore-bc": "offbench.baselines.moore",
    "moore-iql": "offbench.baselines.moore",
    "prompt-dt": "offbench.baselines.prompt_dt",
    "harmodt": "offbench.baselines.harmodt",
    "ad": "offbench.baselines.ad",
    "dpt": "offbench.baselines.dpt",
}


def get_baseline(name: str) -> type:
    """The baseline class registered under `name`."""
    if name not in BASELINES:
        raise OffbenchError(f"unknown baseline '{name}' (known: {', '.join(sorted(BASELINES))})")
    module = importlib.import_module(BASELINES[name])
    classes = [obj for obj in vars(module).values() if isinstance(obj, type) and getattr(obj, "name", None) == name]
    if len(classes) != 1:
        raise RuntimeError(f"{module.__name__} must define exactly one class with name = {name!r}, found {len(classes)}")
    return classes[0]
