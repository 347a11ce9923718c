"""Rebuild the environment a dataset card names, through a string-keyed registry of suites.

A card's [env] table says `suite` (gymnasium, offbench, metaworld, minigrid), `id`, and optional
`kwargs`; multi-task suites also take a task name. Suites that need an optional package import it
lazily and name the extra when it is missing.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import Any, Callable

import gymnasium as gym

from offbench.errors import OffbenchError
from offbench.registry import lookup, register

EnvBuilder = Callable[..., gym.Env]

ENV_SUITES: dict[str, EnvBuilder] = {}


register_suite = partial(register, ENV_SUITES)  # @register_suite("name")


@register_suite("gymnasium")
def _make_gymnasium(env_id: str, task: Any = None, **kwargs: Any) -> gym.Env:
    if env_id.split("-")[0] in {"HalfCheetah", "Hopper", "Walker2d", "Ant", "Humanoid", "InvertedPendulum"}:
        from offbench.errors import require

        require("mujoco", "mujoco")
    try:
        with warnings.catch_warnings():
            # A card names an older version on purpose (D4RL cards: -v4, the model their data came from).
            warnings.filterwarnings("ignore", message=".*is out of date", category=DeprecationWarning)
            return gym.make(env_id, **kwargs)
    except gym.error.Error as exc:
        raise OffbenchError(f"cannot make environment '{env_id}': {exc}") from None


SUITE_PACKAGES = {"metaworld": ("metaworld", "metaworld"), "minigrid": ("minigrid", "minigrid"), "xland": ("xminigrid", "xland")}


def require_suite(env_spec: dict[str, Any]) -> None:
    """The package a card's environment suite runs on (`SUITE_PACKAGES`: module, extra) is installed, or a
    one-line error naming the extra; checked from the card alone, before anything is downloaded."""
    from offbench.errors import require

    if env_spec.get("suite") in SUITE_PACKAGES:
        require(*SUITE_PACKAGES[env_spec["suite"]])


def make_env(env_spec: dict[str, Any], task: Any = None) -> gym.Env:
    """An environment from a card's [env] table (and a task, for multi-task suites)."""
    if "id" not in env_spec:
        raise OffbenchError("the dataset card has no [env] id, so it cannot be evaluated in an environment")
    suite = env_spec.get("suite", "gymnasium")
    if suite not in ENV_SUITES:
        import importlib

        try:  # suites register themselves on import: offbench.envs.<suite>
            importlib.import_module(f"offbench.envs.{suite}")
        except ModuleNotFoundError:
            pass
    return lookup(ENV_SUITES, suite, "environment suite")(env_spec["id"], task=task, **env_spec.get("kwargs", {}))
