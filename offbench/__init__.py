"""offbench: datasets, generators, baselines and leaderboards for offline and in-context RL."""

from __future__ import annotations

from pathlib import Path


def __getattr__(name: str) -> str:
    """`offbench.__version__`, read from the package metadata when first asked for (importing
    importlib.metadata would cost every command line call a tenth of a second)."""
    if name != "__version__":
        raise AttributeError(f"module 'offbench' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("offbench")
    except PackageNotFoundError:  # running from a checkout without installing
        return "0.1.0"


def load(id_or_path: str | Path, mirror: str | None = None):
    """Return the dataset (an EpisodeStore) for a registered id or a path, whatever its format.

    A registered id is downloaded or generated on first use and cached under $OFFBENCH_HOME.
    """
    from offbench.data.resolve import resolve

    return resolve(id_or_path, mirror=mirror)


__all__ = ["load", "__version__"]
