"""Shared figure plumbing: headless backend, one colour per row label, reproducible atomic saving."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures are files; never open a window
import matplotlib.pyplot as plt  # noqa: E402

from offbench.errors import OffbenchError  # noqa: E402
from offbench.utils import atomic_write_bytes  # noqa: E402

FORMATS = ("png", "svg", "pdf")
# No dates or random ids in the files: re-rendering unchanged entries gives byte-identical figures.
# SVG text stays text (fonttype none): smaller files, searchable labels.
_METADATA = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}


def figure_format(path: str | Path) -> str:
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise OffbenchError(f"{path}: unknown figure format '.{fmt}' (use .png, .svg or .pdf)")
    return fmt


def plain_text(value: object) -> str:
    """Any string as literal figure text: one line, and `$` escaped so matplotlib never parses it as math
    (the SVG writer escapes XML itself). Labels, dataset ids and titles go through here."""
    return " ".join(str(value).split()).replace("$", r"\$")


def label_colours(labels: list[str]) -> dict[str, tuple]:
    """The same label gets the same colour in every figure of a leaderboard."""
    palette = plt.get_cmap("tab10").colors
    return {label: palette[i % len(palette)] for i, label in enumerate(sorted(labels))}


def save_figure(fig, path: str | Path) -> Path:
    """Write the figure (format from the suffix) via a temp file and rename, then close it."""
    fmt = figure_format(path)
    buffer = io.BytesIO()
    with plt.rc_context({"svg.hashsalt": "offbench", "svg.fonttype": "none"}):
        fig.savefig(buffer, format=fmt, dpi=150, bbox_inches="tight", metadata=_METADATA[fmt])
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())
