#!/usr/bin/env bash
# Run HERE (not on the device) before scripts/device-check.sh: the device image has torch, h5py, numpy, pandas,
# typer, rich, matplotlib, numba and pytest, but not gymnasium (and what it needs) or tomli-w, and nothing can be
# fetched there. This downloads those wheels (the versions this checkout's .venv runs) into .whl/ for the device's
# Python 3.12, and keeps .whl/ out of git. Then: run(command="bash scripts/device-check.sh", carry=[".whl"]).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
version() { .venv/bin/python -c "import importlib.metadata as m; print(m.version('$1'))"; }
mkdir -p .whl
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    "gymnasium==$(version gymnasium)" "farama-notifications==$(version farama-notifications)" "tomli-w==$(version tomli-w)"
ls -l .whl
