"""Shared figure plumbing: headless backend, one colour per row label, one legend per figure, captions that say
what is drawn, reproducible atomic saving."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")  # figures are files; never open a window
import matplotlib.pyplot as plt  # noqa: E402

from offbench.errors import OffbenchError  # noqa: E402
from offbench.utils import atomic_write_bytes  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import ColorType

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


def label_colours(labels: list[str]) -> dict[str, ColorType]:
    """The same label gets the same colour in every figure of a leaderboard."""
    palette = matplotlib.color_sequences["tab10"]
    return {label: palette[i % len(palette)] for i, label in enumerate(sorted(labels))}


def shared_legend(fig, axes, columns: int = 3) -> None:
    """One legend below all panels: a label has the same colour in every panel, so one key covers them (a legend per
    panel covered the data of small panels). Entries in first-seen order, each label once."""
    entries: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(
            list(entries.values()), list(entries), loc="outside lower center", ncol=min(columns, len(entries)), fontsize=8, frameon=False
        )


def curve_caption(subject: str, drawn: list[tuple[int, int]], title: str = "") -> str:
    """The suptitle of a figure of mean curves, true to what was drawn: `drawn` holds (seeds, points) per curve. A band
    is claimed only where there are seeds to bootstrap, and a curve of one evaluation is named as the point it is. A
    given `title` is kept, with those facts added below it where they differ from a band over full curves."""
    seeds = {n for n, _ in drawn}
    if seeds == {1}:
        band = "one seed, no band"
    else:
        band = "mean over seeds, shaded 95% bootstrap interval" + (" (none for rows of one seed)" if 1 in seeds else "")
    points = "; a run with one evaluation is drawn as a point" if any(n_points == 1 for _, n_points in drawn) else ""
    if not title:
        return f"{subject}: {band}{points}"
    return title if 1 not in seeds and not points else f"{title}\n({band}{points})"


def save_figure(fig, path: str | Path) -> Path:
    """Write the figure (format from the suffix) via a temp file and rename, then close it."""
    fmt = figure_format(path)
    buffer = io.BytesIO()
    with plt.rc_context({"svg.hashsalt": "offbench", "svg.fonttype": "none"}):
        fig.savefig(buffer, format=fmt, dpi=150, bbox_inches="tight", metadata=_METADATA[fmt])
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())
