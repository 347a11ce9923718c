"""Virtual environments for peer libraries whose pins clash with ours (d3rlpy 2.8 pins gymnasium 1.0.0).

`peer_python("d3rlpy")` returns the interpreter of `benchmarks/.venvs/d3rlpy`, created on first use with
the same torch build, so a benchmark can run the peer in a subprocess on the same dataset file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
