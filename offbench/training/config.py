"""Resolve a run's configuration, each layer overriding the one before:

    dataclass defaults  <-  baselines/<name>/<standard>.toml  <-  --config FILE  <-  --set key=value

The standard file is the longest match of the dataset id in the baseline's folder: for
`d4rl/hopper-medium-v2` the candidates are `d4rl-hopper-medium-v2.toml`, `d4rl-hopper-medium.toml`,
`d4rl-hopper.toml`, `d4rl.toml`, then `default.toml`. A dataset whose card names an `analogue` (the published
dataset it re-makes: `mujoco-local/hopper-medium` names `d4rl/hopper-medium-v2`) and matches no file of its own
takes the analogue's match before `default.toml`. A built-in's folder is `baselines/<name>/`, and it has a
`default.toml`; a plugin's is `configs/<name>/` beside the module file that defines its class, shipped in its
package (docs/plugins.md), and may be missing or hold no `default.toml`: its `Config` defaults then stand, and the
run's config sources say so. Config files are flat TOML tables whose keys are
fields of the training config (`TrainConfig`) or of the baseline's `Config`, plus a `source` string
saying where the numbers come from. Every value is checked against its field's type and against the
values its field allows (`offbench.records.ranged`: bounds, choices; floats always finite), so an unknown
key, a wrong type or a value out of range is a one-line error naming the file or option, before a run
directory exists.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from offbench.errors import OffbenchError
from offbench.evaluation.protocols import TASK_SPLITS
from offbench.evaluation.rollout import EPISODES_PER_SEED as MAX_EVAL_EPISODES  # evaluation seeds stay per training seed
from offbench.paths import builtin_dir
from offbench.records import check_allowed, coerce, field_limits, field_types, ranged
from offbench.utils import read_text

METADATA_KEYS = ("source",)


@dataclass
class TrainConfig:
    """What every baseline's training loop needs (the baseline's own Config holds the algorithm's)."""

    steps: int = ranged(100_000, ge=1)
    batch_size: int = ranged(256, ge=1)
    # rows per backward pass (on each process): the batch's gradient accumulated over micro-batches of this many rows
    # before one optimiser step (offbench/baselines/base.py MicroBatching); "auto": the largest that fits the memory
    # estimate (offbench/training/memory.py), recorded in run.json; none: the whole batch at once
    micro_batch: int | Literal["auto"] | None = ranged(None, ge=1)
    log_every: int = ranged(1_000, ge=1)  # metrics.jsonl gets the mean of each loss over this many updates
    eval_every: int = ranged(10_000, ge=1)
    eval_episodes: int = ranged(
        10, ge=0, le=MAX_EVAL_EPISODES
    )  # 0: no evaluation; per task on multi-task data; consecutive episodes in context
    eval_deterministic: bool = True  # greedy / mean actions at evaluation; false samples (baselines that can)
    eval_tasks: str = ranged("held-out", choices=TASK_SPLITS)  # in context: the tasks evaluated; choose variants on validation
    checkpoint_every: int = ranged(10_000, ge=1)


@dataclass
class ResolvedConfig:
    train: TrainConfig
    baseline: Any  # the baseline's Config dataclass
    sources: list[str]  # the files and overrides applied, in order

    def as_dict(self) -> dict[str, Any]:
        """One flat dict (what run.json records and `--config` reads back)."""
        return {**dataclasses.asdict(self.baseline), **dataclasses.asdict(self.train)}


def dataset_slug(dataset_id: str) -> str:
    """The id as one safe file-name part (ids of paths come from file names, which may hold anything)."""
    slug = re.sub(r"[^a-z0-9._+-]+", "-", dataset_id.strip("/").replace("/", "-").lower())
    return slug.strip("-.")[:80] or "dataset"


def standard_config_folder(baseline_name: str) -> Path:
    """Where a baseline's standard configs live (the module docstring's rule)."""
    from offbench.baselines import BASELINES, get_baseline

    if baseline_name in BASELINES:
        return builtin_dir("baselines") / baseline_name
    return Path(inspect.getfile(get_baseline(baseline_name))).resolve().parent / "configs" / baseline_name


def registered_analogue(dataset_id: str | None) -> str | None:
    """The published dataset that `dataset_id`'s card says it re-makes (its `analogue`); None for a path or a card
    without one."""
    from offbench.data.cards import get_card

    if not dataset_id:
        return None
    try:
        return get_card(dataset_id).analogue
    except OffbenchError:  # a path, or an id no card registers: only its own name is matched
        return None


def longest_prefix_file(folder: Path, dataset_id: str | None) -> Path | None:
    """The file in `folder` named by the longest prefix of the id's slug (the module docstring's rule), if any."""
    parts = dataset_slug(dataset_id).split("-") if dataset_id else []
    for n in range(len(parts), 0, -1):
        candidate = folder / ("-".join(parts[:n]) + ".toml")
        if candidate.is_file():
            return candidate
    return None


def standard_config_path(baseline_name: str, dataset_id: str | None) -> Path | None:
    """The standard config file for this baseline and dataset; None for a plugin that ships none that applies."""
    from offbench.baselines import BASELINES

    folder = standard_config_folder(baseline_name)
    matched = longest_prefix_file(folder, dataset_id) or longest_prefix_file(folder, registered_analogue(dataset_id))
    if matched is not None:
        return matched
    default = folder / "default.toml"
    if default.is_file():
        return default
    if baseline_name in BASELINES:
        raise OffbenchError(f"{default}: missing (every built-in baseline needs a default standard config)")
    return None


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(read_text(path, "config"))
    except tomllib.TOMLDecodeError as exc:
        raise OffbenchError(f"{path}: malformed TOML ({exc})") from None
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


def resolve_config(
    baseline_cls: type,
    dataset_id: str | None,
    config_file: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> ResolvedConfig:
    """Apply the layers in order; a key goes to every config dataclass that has a field of that name."""
    sections = [TrainConfig(), baseline_cls.Config()]
    fields = [field_types(section) for section in sections]
    limits = [field_limits(section) for section in sections]
    standard = standard_config_path(baseline_cls.name, dataset_id)
    layers: list[tuple[str, dict[str, Any]]] = [
        (str(standard), read_config_file(standard))
        if standard is not None
        else (f"{baseline_cls.name} Config defaults (no standard config in {standard_config_folder(baseline_cls.name)})", {})
    ]
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
                setattr(
                    sections[i], key, check_allowed(coerce(value, fields[i][key], f"{where}: '{key}'"), limits[i][key], f"{where}: '{key}'")
                )
    train, baseline = sections
    return ResolvedConfig(train=train, baseline=baseline, sources=[where for where, _ in layers])


def config_from_dict(baseline_cls: type, values: dict[str, Any]) -> ResolvedConfig:
    """Rebuild a resolved config from its flat dict (run.json), checking every value again."""
    sections = [TrainConfig(), baseline_cls.Config()]
    for section in sections:
        limits = field_limits(section)
        for name, annotation in field_types(section).items():
            if name in values:
                where = f"run.json config '{name}'"
                setattr(section, name, check_allowed(coerce(values[name], annotation, where), limits[name], where))
    return ResolvedConfig(train=sections[0], baseline=sections[1], sources=["run.json"])
