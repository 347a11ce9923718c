"""Checks for a baseline's own test suite (as scikit-learn's `check_estimator` is for estimators): the contract
every built-in baseline passes, so a class that passes trains, resumes and evaluates under `offbench run baseline`.

    from offbench.testing import check_baseline

    def test_my_method_meets_the_offbench_contract():
        check_baseline(MyMethod, {"hidden_dim": 8}, "pendulum-scripted")

A broken rule is an AssertionError naming the class, the rule and what was found.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from offbench.data.spec import DatasetSpec
from offbench.evaluation.policy import Policy, PolicyOptions

SAMPLE_BATCH_SIZE = 8


def check_baseline(cls: type, tiny_config: Any, dataset: Any, *, num_envs: int = 3, device: str = "cpu") -> None:
    """Build `cls` with `tiny_config` (a `cls.Config`, a dict of its fields to change, or None for the class's own
    `tiny_config`) on `dataset` (an EpisodeStore, or a dataset id or path as `offbench.load` takes, of a kind the
    class trains on), take two updates on `device`, round-trip its state through a weights-only checkpoint, and check that the policies it
    builds act in the dataset's action space: the same way after the round trip, and after one more update on
    each side (exactly on the CPU; off it, within float tolerance, since CUDA's updates differ in the last bits).
    Off the CPU the checkpoint must also load onto the CPU (as `offbench evaluate --device cpu` loads it) and act
    there."""
    contract = Contract(cls)
    check_class(cls, contract)
    if isinstance(dataset, (str, os.PathLike)):
        import offbench

        dataset = offbench.load(dataset if isinstance(dataset, str) else Path(dataset))  # a string: an id or a path
    spec = DatasetSpec.from_store(dataset)
    kind = "discrete" if spec.discrete else "continuous"
    contract.require(
        kind in cls.action_kinds,
        f"the dataset has {kind} actions, but action_kinds is {cls.action_kinds!r}: check it on data of a kind it takes",
    )
    config = as_config(cls, tiny_config, contract)

    def build(where: str):
        return cls(dataclasses.replace(config), spec, where)  # a config of its own, as each run has

    torch.manual_seed(0)
    baseline = build(device)
    sampler = sampler_for(baseline, dataset, device)
    for _ in range(2):
        check_losses(baseline.update(sampler.sample()), contract, getattr(cls, "trains", True))

    checkpoint = saved(baseline.state_dict(), contract)
    restored = {}
    for where in dict.fromkeys([device, "cpu"]):  # the same device, and the CPU
        checkpoint.seek(0)
        restored[where] = build(where)
        restored[where].load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True))

    options = PolicyOptions(task_ids=np.arange(num_envs) % max(spec.num_tasks, 1), target_return=1.0 if cls.return_conditioned else None)
    observations = np.asarray(dataset.observations[:num_envs])
    acted = {
        name: act(model, options, observations, spec, num_envs, contract) for name, model in (("original", baseline), *restored.items())
    }
    contract.require(
        np.array_equal(acted["original"], acted[device]),
        "an instance loaded with state_dict() acts differently from the one it came from: state_dict must hold "
        "everything the policy uses (networks, normalisers)",
    )

    batch = sampler.sample()
    for model in (baseline, restored[device]):
        random.seed(1)  # the same draws on both sides, as a resume restores every RNG
        np.random.seed(1)
        torch.manual_seed(1)
        check_losses(model.update(batch), contract, getattr(cls, "trains", True))
    same = np.array_equal if device == "cpu" else functools.partial(np.allclose, rtol=1e-4, atol=1e-6)  # CUDA's atomics: last bits
    contract.require(
        same(
            act(baseline, options, observations, spec, num_envs, contract),
            act(restored[device], options, observations, spec, num_envs, contract),
        ),
        "after one more update on the same batch, the instance loaded with state_dict() acts differently from "
        "the original: state_dict must hold everything training uses (optimiser state, schedules, counters), "
        "or a resumed run would not continue the interrupted one",
    )


class Contract:
    """Raises the AssertionError of a broken rule, naming the class."""

    def __init__(self, cls: type):
        self.label = getattr(cls, "__qualname__", repr(cls))

    def require(self, holds: bool, rule: str) -> None:
        if not holds:
            raise self.broken(rule)

    def broken(self, rule: str) -> AssertionError:
        return AssertionError(f"{self.label}: {rule}")


def check_class(cls: type, contract: Contract) -> None:
    """Its class attributes (the registry's own check), and a Config that run.json can record and read back."""
    from offbench.baselines import contract_problems
    from offbench.training.config import config_from_dict

    problems = contract_problems(cls)
    contract.require(not problems, "; ".join(problems))
    values = dataclasses.asdict(cls.Config())
    try:
        read_back = dataclasses.asdict(config_from_dict(cls, values).baseline)
    except TypeError as exc:
        raise contract.broken(f"Config fields must be bool, int, float, str, optional or lists of them ({exc})") from None
    contract.require(read_back == values, f"Config does not read back from its own values (run.json): {values} became {read_back}")


def as_config(cls: type, tiny_config: Any, contract: Contract) -> Any:
    """`tiny_config` as a Config instance (None: the class's own `tiny_config`)."""
    if isinstance(tiny_config, cls.Config):
        return tiny_config
    if tiny_config is None:
        contract.require(hasattr(cls, "tiny_config"), "tiny_config is None, but the class has no tiny_config of its own: pass one")
        tiny_config = cls.tiny_config
    contract.require(
        isinstance(tiny_config, dict), f"tiny_config must be a {cls.Config.__name__} or a dict of its fields, got {tiny_config!r}"
    )
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    unknown = sorted(set(tiny_config) - fields)
    contract.require(
        not unknown, f"tiny_config sets {', '.join(unknown)}, not fields of {cls.Config.__name__} ({', '.join(sorted(fields))})"
    )
    return dataclasses.replace(cls.Config(), **tiny_config)


def sampler_for(baseline: Any, store: Any, device: str):
    from offbench.training.trainer import baseline_sampler

    return baseline_sampler(baseline, store, SAMPLE_BATCH_SIZE, 0, device)


def check_losses(losses: Any, contract: Contract, trains: bool = True) -> None:
    """A learner reports what it optimised; an agent with nothing to learn (`trains = False`) reports nothing."""
    if not trains:
        contract.require(
            losses == {}, f"a baseline with trains = False has nothing to learn: update(batch) must return {{}}, got {losses!r}"
        )
        return
    contract.require(
        isinstance(losses, dict) and bool(losses) and all(np.isfinite(float(v)) for v in losses.values()),
        f"update(batch) must return a non-empty dict of finite losses, got {losses!r}",
    )


def saved(state: Any, contract: Contract) -> io.BytesIO:
    """`state` written as the trainer writes checkpoints, and loadable as it loads them (weights only)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    try:
        torch.load(buffer, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - the unpickler's refusal, whatever its class
        raise contract.broken(
            f"state_dict() must hold only tensors and plain Python values, which a checkpoint loads with "
            f"weights_only=True ({type(exc).__name__}: {str(exc).splitlines()[0]})"
        ) from None
    return buffer


def act(model: Any, options: PolicyOptions, observations: np.ndarray, spec: DatasetSpec, num_envs: int, contract: Contract) -> np.ndarray:
    """One step of a fresh policy on `observations`; its actions."""
    policy = model.policy(options)
    contract.require(isinstance(policy, Policy), f"policy(options) must return a Policy (reset, act, observe), got {type(policy).__name__}")
    policy.reset(num_envs)
    actions = np.asarray(policy.act(observations))
    policy.observe(np.zeros(num_envs, np.float32), np.zeros(num_envs, bool))
    contract.require(len(actions) == num_envs, f"policy.act gave {len(actions)} actions for {num_envs} environments")
    outside = [a for a in actions if not spec.action_space.contains(np.asarray(a, dtype=spec.action_space.dtype))]
    contract.require(not outside, f"policy.act gave actions outside the action space {spec.action_space}: {outside[:3]}")
    return actions
