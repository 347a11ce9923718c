#!/usr/bin/env bash
# Create .venv and install offbench with every extra the tests use. Safe to run again (it reuses .venv).
#   bash scripts/setup.sh          # the toolkit and its environment suites
#   bash scripts/setup.sh --test   # also test tools and Debian's chromium (browser test of the leaderboard page)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# torch first, pinned: an unpinned torch pulls a multi-GB CUDA build on a CPU machine.
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
if [ "${1:-}" = "--test" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
    if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
            || echo "setup: could not install chromium; the browser test will be skipped" >&2
    fi
else
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[all]"
fi
