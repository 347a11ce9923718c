#!/usr/bin/env bash
# What CI checks, in order: lint (ruff), formatting (ruff format), types (basedpyright, pyright's basic mode), then
# the default test suite with the 25 slowest tests listed, one pytest-xdist worker per core (a test file stays on one
# worker, so module fixtures are built once; OFFBENCH_TEST_WORKERS=0 runs in one process). Configuration:
# pyproject.toml. Run after scripts/setup.sh --test.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/basedpyright --project pyproject.toml
.venv/bin/python -m pytest -n "${OFFBENCH_TEST_WORKERS:-auto}" --dist loadfile --durations=25 "$@"
