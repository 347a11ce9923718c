"""offbench: datasets, generators, baselines and leaderboards for offline and in-context RL.

The public Python API (docs/python-api.md): `load` a dataset, draw batches with `sampler`, play any policy under a
card's evaluation protocol with `evaluate`, record your own training loop with `track`; `Policy` and
`PolicyOptions` are what evaluation asks of a policy, `EvaluationResult` what it gives back. Names are imported on
first use, so `import offbench` stays cheap (no torch).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what `__getattr__` imports on first use, named here for type checkers only
    from offbench.data.samplers import sampler
    from offbench.evaluation.external import EvaluationResult
    from offbench.evaluation.policy import Policy, PolicyOptions
    from offbench.tracking.track import TrackedRun, evaluate, track

    __version__: str

_LAZY = {
    "sampler": "offbench.data.samplers",
    "evaluate": "offbench.tracking.track",
    "track": "offbench.tracking.track",
    "TrackedRun": "offbench.tracking.track",
    "EvaluationResult": "offbench.evaluation.external",
    "Policy": "offbench.evaluation.policy",
    "PolicyOptions": "offbench.evaluation.policy",
}


def __getattr__(name: str):
    """`offbench.__version__` (from the package metadata: importing importlib.metadata would cost every command line
    call a tenth of a second) and the public names of `_LAZY`, imported when first asked for."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name != "__version__":
        raise AttributeError(f"module 'offbench' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("offbench")
    except PackageNotFoundError:  # running from a checkout without installing
        return "0.1.0"


def __dir__() -> list[str]:
    return sorted(__all__)


def load(id_or_path: str | Path, mirror: str | None = None):
    """Return the dataset for a registered id or a path, whatever its format: an EpisodeStore (an XLand file,
    read in place, is an XLandHistories).

    A registered id is downloaded or generated on first use and cached under $OFFBENCH_HOME.
    """
    from offbench.data.resolve import resolve

    return resolve(id_or_path, mirror=mirror)


__all__ = ["load", "sampler", "evaluate", "track", "TrackedRun", "EvaluationResult", "Policy", "PolicyOptions", "__version__"]
