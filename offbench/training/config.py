"""Resolve a run's configuration, each layer overriding the one before:

    dataclass defaults  <-  baselines/<name>/<standard>.toml  <-  --config FILE  <-  --set key=value

The standard file is the longest match of the dataset id in `baselines/<name>/`: for
`d4rl/hopper-medium-v2` the candidates are `d4rl-hopper-medium-v2.toml`, `d4rl-hopper-medium.toml`,
`d4rl-hopper.toml`, `d4rl.toml`, then `default.toml`. Config files are flat TOML tables whose keys are
fields of the training config (`TrainConfig`) or of the baseline's `Config`, plus a `source` string
saying where the numbers come from. Every value is checked against its field's type, so an unknown
key or a wrong type is a one-line error before anything trains.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offbench.errors import OffbenchError
from offbench.paths import builtin_dir

from offbench.evaluation.rollout import EPISODES_PER_SEED as MAX_EVAL_EPISODES  # evaluation seeds stay per training seed

METADATA_KEYS = ("source",)


@dataclass
class TrainConfig:
    """What every baseline's training loop needs (the baseline's own Config holds the algorithm's)."""

    steps: int = 100_000
    batch_size: int = 256
    log_every: int = 1_000  # metrics.jsonl gets the mean of each loss over this many updates
    eval_every: int = 10_000
    eval_episodes: int = 10  # 0: no evaluation; per task on multi-task data; consecutive episodes in context
    eval_deterministic: bool = True  # greedy / mean actions at evaluation; false samples (baselines that can)
    checkpoint_every: int = 10_000

    def validate(self) -> None:
        for key in ("steps", "batch_size", "log_every", "eval_every", "checkpoint_every"):
            if getattr(self, key) < 1:
                raise OffbenchError(f"config: '{key}' must be at least 1, got {getattr(self, key)}")
        if not 0 <= self.eval_episodes <= MAX_EVAL_EPISODES:
            raise OffbenchError(f"config: 'eval_episodes' must be between 0 and {MAX_EVAL_EPISODES}, got {self.eval_episodes}")


@dataclass
class ResolvedConfig:
    train: TrainConfig
    baseline: Any  # the baseline's Config dataclass
    sources: list[str]  # the files and overrides applied, in order

    def as_dict(self) -> dict[str, Any]:
        """One flat dict (what run.json records and `--config` reads back)."""
        return {**dataclasses.asdict(self.baseline), **dataclasses.asdict(self.train)}


def dataset_slug(dataset_id: str) -> str:
    return dataset_id.strip("/").replace("/", "-").lower()


def standard_config_path(baseline_name: str, dataset_id: str | None) -> Path:
    folder = builtin_dir("baselines") / baseline_name
    if dataset_id:
        parts = dataset_slug(dataset_id).split("-")
        for n in range(len(parts), 0, -1):
            candidate = folder / ("-".join(parts[:n]) + ".toml")
            if candidate.is_file():
                return candidate
    default = folder / "default.toml"
    if not default.is_file():
        raise OffbenchError(f"{default}: missing (every baseline needs a default standard config)")
    return default


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as exc:
        raise OffbenchError(f"{path}: malformed TOML ({exc})") from None
    except OSError as exc:
        raise OffbenchError(f"{path}: cannot read config ({exc.strerror})") from None
    if "source" in data and not isinstance(data["source"], str):
        raise OffbenchError(f"{path}: 'source' must be a string saying where the numbers come from")
    return {k: v for k, v in data.items() if k not in METADATA_KEYS}


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` with the value read as TOML (1e-4, 3, true, [1, 2], "x"), else as a bare string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise OffbenchError(f"--set {text!r}: expected key=value")
    try:
        value = tomllib.loads(f"value = {raw.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key, value


def describe(annotation: Any) -> str:
    """A field type in words, for error messages: 'a number', 'a list of numbers', ..."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in args if a is not type(None))
    if origin in (tuple, list):
        item = describe(args[0]) if args else "values"
        plural = {"a number": "numbers", "an integer": "integers", "a string": "strings", "true or false": "booleans"}.get(item, item)
        if origin is tuple and args and args[-1] is not Ellipsis:
            return f"a list of {len(args)} {plural}"
        return f"a list of {plural}"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(annotation, str(annotation))


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """`value` as the field type `annotation` wants, or OffbenchError naming `where` (file and key)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if value is None and len(options) < len(args):
            return None
        for option in options:
            try:
                return coerce(value, option, where)
            except OffbenchError:
                continue
        raise OffbenchError(f"{where} must be {describe(annotation)}, got {value!r}")
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise OffbenchError(f"{where} must be {describe(annotation)}, got {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise OffbenchError(f"{where} must be {describe(annotation)}, got {value!r}")
            return tuple(coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        item = args[0] if args else Any
        items = [coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if annotation is Any:
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise OffbenchError(f"{where} must be true or false, got {value!r}")
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise OffbenchError(f"{where} must be an integer, got {value!r}")
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise OffbenchError(f"{where} must be a number, got {value!r}")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise OffbenchError(f"{where} must be a string, got {value!r}")
    raise TypeError(f"config field type {annotation!r} is not supported")


def field_types(config: Any) -> dict[str, Any]:
    """Field name -> resolved type annotation of a config dataclass."""
    hints = typing.get_type_hints(type(config))
    return {f.name: hints[f.name] for f in dataclasses.fields(config)}


def resolve_config(
    baseline_cls: type,
    dataset_id: str | None,
    config_file: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> ResolvedConfig:
    """Apply the layers in order; a key goes to every config dataclass that has a field of that name."""
    sections = [TrainConfig(), baseline_cls.Config()]
    fields = [field_types(section) for section in sections]
    standard = standard_config_path(baseline_cls.name, dataset_id)
    layers: list[tuple[str, dict[str, Any]]] = [(str(standard), read_config_file(standard))]
    if config_file is not None:
        layers.append((str(config_file), read_config_file(Path(config_file))))
    if overrides:
        layers.append(("--set " + " ".join(overrides), dict(parse_override(text) for text in overrides)))
    for where, values in layers:
        for key, value in values.items():
            targets = [i for i, f in enumerate(fields) if key in f]
            if not targets:
                known = sorted(set().union(*fields))
                raise OffbenchError(f"{where}: unknown config key '{key}' for baseline '{baseline_cls.name}' (known: {', '.join(known)})")
            for i in targets:
                setattr(sections[i], key, coerce(value, fields[i][key], f"{where}: '{key}'"))
    train, baseline = sections
    train.validate()
    return ResolvedConfig(train=train, baseline=baseline, sources=[where for where, _ in layers])


def config_from_dict(baseline_cls: type, values: dict[str, Any]) -> ResolvedConfig:
    """Rebuild a resolved config from its flat dict (run.json), checking every value again."""
    sections = [TrainConfig(), baseline_cls.Config()]
    for section in sections:
        for name, annotation in field_types(section).items():
            if name in values:
                setattr(section, name, coerce(values[name], annotation, f"run.json config '{name}'"))
    return ResolvedConfig(train=sections[0], baseline=sections[1], sources=["run.json"])
