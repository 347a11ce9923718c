"""Gymnasium spaces <-> JSON, so a dataset file describes its spaces without pickles."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np

from offbench.errors import OffbenchError


def _compact(values: np.ndarray) -> Any:
    """A bound array as a scalar when all entries are equal (the common case), else a nested list."""
    flat = values.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return float(flat[0])
    return values.tolist()


def space_to_dict(space: gym.Space) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": _compact(space.low),
            "high": _compact(space.high),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist()}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": list(np.atleast_1d(space.n))}
    raise OffbenchError(f"space {space} cannot be stored; flatten it to a Box first")


def space_from_dict(spec: dict[str, Any]) -> gym.Space:
    kind = spec.get("type")
    if kind == "Box":
        shape = tuple(spec["shape"])
        dtype = np.dtype(spec["dtype"])
        low = np.broadcast_to(np.asarray(spec["low"], dtype=dtype), shape)
        high = np.broadcast_to(np.asarray(spec["high"], dtype=dtype), shape)
        return gym.spaces.Box(low=low, high=high, shape=shape, dtype=dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(int(spec["n"]), start=int(spec.get("start", 0)))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(np.asarray(spec["nvec"]))
    if kind == "MultiBinary":
        n = spec["n"]
        return gym.spaces.MultiBinary(n[0] if len(n) == 1 else n)
    raise OffbenchError(f"unknown space type {kind!r} in {spec}")


def space_to_json(space: gym.Space | None) -> str:
    return "null" if space is None else json.dumps(space_to_dict(space))


def space_from_json(text: str) -> gym.Space | None:
    spec = json.loads(text)
    if spec is not None and not isinstance(spec, dict):
        raise ValueError(f"a space must be a JSON object or null, got {text[:80]!r}")
    return None if spec is None else space_from_dict(spec)


def widest_space(sample: np.ndarray) -> gym.Space:
    """A space of `sample`'s row shape and dtype admitting every value, for files that record no space."""
    sample = np.asarray(sample)
    if sample.dtype.kind == "f":
        return gym.spaces.Box(-np.inf, np.inf, sample.shape[1:], sample.dtype)
    if sample.dtype.kind == "b":
        return gym.spaces.MultiBinary(list(sample.shape[1:]) or 1)
    info = np.iinfo(sample.dtype)
    return gym.spaces.Box(info.min, info.max, sample.shape[1:], sample.dtype)
