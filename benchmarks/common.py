"""What the benchmark scripts share: the checkout's root, peer libraries in their own virtual environments, and
printing a result table with the conditions it was measured under.

Every script under `benchmarks/speed/` and `benchmarks/studies/` opens with

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.common
    from benchmarks.common import ...

so that `.venv/bin/python benchmarks/speed/sampling.py` runs from the repository root without PYTHONPATH.

Peers whose pins clash with ours (d3rlpy 2.8 pins gymnasium 1.0.0) run in `benchmarks/.venvs/NAME`, made on
first use with the same torch build: `peer_python("d3rlpy")` is its interpreter, and `run_peer` runs a Python
snippet there, so a benchmark can time the peer in a subprocess on the same dataset file.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

REPO = Path(__file__).resolve().parents[1]

PEERS = {
    "d3rlpy": ["torch==2.13.0", "d3rlpy==2.8.1", "h5py", "numpy"],
    "minari": ["torch==2.13.0", "minari==0.5.4", "h5py", "numpy"],
}
VENVS = Path(__file__).resolve().parent / ".venvs"


def peer_python(name: str) -> Path:
    """Interpreter of the peer's virtual environment, creating it on first use."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if not marker.exists():
        print(f"[peers] creating {venv} for {name} (first use only)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PEERS[name]], check=True)
        marker.write_text("\n".join(PEERS[name]))
    return python


def run_peer(name: str, script: str, *args: str) -> str:
    """Run a Python snippet in the peer's environment and return its stdout."""
    proc = subprocess.run([str(peer_python(name)), "-c", script, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} peer failed:\n{proc.stderr[-4000:]}")
    return proc.stdout


def cli_help(doc: str | None, paragraphs: int = 3) -> str:
    """What `--help` shows of a script's docstring: its first paragraphs (the question, the command, where the
    answer stands), prose re-flowed so the terminal can wrap it, indented command lines kept one per line."""
    out = []
    for paragraph in (doc or "").strip().split("\n\n")[:paragraphs]:
        lines = [line for line in paragraph.splitlines() if line.strip()]
        if lines and all(line.startswith("    ") for line in lines):
            out.append("\n".join(line.strip() for line in lines))
        else:
            out.append(" ".join(paragraph.split()))
    return "\n\n".join(out)


def machine() -> str:
    """When and where a measurement ran: UTC time, CPU model, cores and load average (read ratios, not rates,
    when the load is above the core count)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {model}, {os.cpu_count()} cores, load average {load}"


def speedup(ours: float, theirs: float, digits: int = 2) -> str:
    """A ratio as the tables print it, e.g. '1.54x' (ours / theirs: pass rates, or times swapped)."""
    return f"{ours / theirs:.{digits}f}x"


def markdown_table(rows: Iterable[Mapping[str, Any]] | Any) -> str:
    """A Markdown table from a pandas DataFrame or a list of dicts (keys of the first row are the columns)."""
    if hasattr(rows, "to_dict") and hasattr(rows, "columns"):
        columns = [str(c) for c in rows.columns]
        records = [dict(zip(columns, values)) for values in rows.itertuples(index=False)]
    else:
        records = [dict(row) for row in rows]
        columns = list(records[0]) if records else []
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in records]
    return "\n".join(lines)


def print_table(rows: Iterable[Mapping[str, Any]] | Any, title: str | None = None, conditions: bool = True) -> None:
    """Print a result table as Markdown (what docs/results.md and the study notes paste), headed by its title
    and, with `conditions`, the line of `machine()` it was measured under."""
    if title:
        print(f"\n{title}")
    if conditions:
        print(f"(measured {machine()})")
    print()
    print(markdown_table(rows), flush=True)
