"""stable-baselines3 without its temp-dir litter.

An SB3 model given no logger of its own configures one at every `learn()` call, and that makes an empty folder
`SB3-<timestamp>` under the system's temp dir even at `verbose=0`. The generators call `learn()` once per checkpoint,
so a Meta-World or Hopper run left hundreds of them behind. A logger with no outputs records nothing and writes
nothing; it touches no random state, so the run is the same step for step.
"""

from __future__ import annotations

from typing import Any


def without_log_folders(model: Any) -> Any:
    """`model`, logging nowhere from now on (set again on every model loaded from disk: a loaded one has no logger)."""
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
    return model
