"""offbench: datasets, generators, baselines and leaderboards for offline and in-context RL."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("offbench")
except PackageNotFoundError:  # running from a checkout without installing
    __version__ = "0.1.0"


def load(id_or_path: str | Path, mirror: str | None = None):
    """Return the dataset (an EpisodeStore) for a registered id or a path, whatever its format.

    A registered id is downloaded or generated on first use and cached under $OFFBENCH_HOME.
    """
    from offbench.data.resolve import resolve

    return resolve(id_or_path, mirror=mirror)


__all__ = ["load", "__version__"]
