"""String-keyed registry of baselines: name -> class, imported only when that baseline is used.

A built-in baseline is one module in this folder defining a class with a string `name` and a `Config` dataclass
(`offbench.baselines.base.Baseline`), plus its standard configs in `baselines/<name>/`: nothing registers it
but the file. `builtin_baselines` finds the classes by reading the modules' source (a class-level `name = "..."`
beside a class-level `Config = ...`), without importing them. Built-ins are found this way rather than through
entry points so that they never depend on how offbench was installed: an editable install's entry points are
those of its last `pip install -e`, and a checkout on `PYTHONPATH` has none, while a new module here is a
baseline at once. Another package adds its own with an entry point (docs/plugins.md):

    [project.entry-points."offbench.baselines"]
    mymethod = "my_pkg.algo:MyMethod"

Entry points are read on the first lookup, not when offbench is imported, and a plugin's module is imported only
when it is asked for or listed. A plugin never shadows a built-in: a name claimed twice is an error when asked
for. A plugin that cannot be used (its module fails to import, its class breaks the contract, its name is taken)
is a one-line error naming its distribution when asked for, and only a mention in listings and in other
baselines' messages, so one broken package stops nothing else.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import itertools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offbench.errors import OffbenchError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

CLASS_LINE = re.compile(r"^class \w+", re.MULTILINE)
# a class-level `name = "..."` or `Config = ...` (four spaces in: the class's own body, not a method's)
CLASS_ATTRIBUTE = re.compile(r"^    (name|Config)\b[^=\n]*=\s*(.+?)\s*(?:#.*)?$", re.MULTILINE)
STRING = re.compile(r"""(["'])([^"']+)\1""")


def builtin_baselines() -> dict[str, str]:
    """Built-in name -> the module defining it: every class in offbench/baselines/*.py with a class-level string
    `name` and a `Config`, found by reading the files (a few ms), sorted by name."""
    found: dict[str, str] = {}
    for path in sorted(Path(__file__).parent.glob("*.py")):
        module = f"{__name__}.{path.stem}"
        for name in declared_baselines(path.read_text(encoding="utf-8")):
            if name in found:
                raise RuntimeError(f"baseline '{name}' is defined twice: in {found[name]} and in {module}")
            found[name] = module
    return dict(sorted(found.items()))


def declared_baselines(source: str) -> list[str]:
    """The `name`s of the classes in module `source` that declare both a string `name` and a `Config`."""
    starts = [match.start() for match in CLASS_LINE.finditer(source)] + [len(source)]
    names = []
    for start, end in itertools.pairwise(starts):
        attributes = {match.group(1): match.group(2) for match in CLASS_ATTRIBUTE.finditer(source, start, end)}
        literal = STRING.fullmatch(attributes.get("name", ""))
        if "Config" in attributes and literal:
            names.append(literal.group(2))
    return names


BASELINES: dict[str, str] = builtin_baselines()

PLUGIN_GROUP = "offbench.baselines"
ACTION_KINDS = ("continuous", "discrete")
METHODS = ("update", "policy", "state_dict", "load_state_dict")


def get_baseline(name: str) -> type:
    """The baseline class registered under `name`, built in or from a plugin."""
    claims = plugin_entry_points().get(name, ())
    if name in BASELINES:
        if claims:
            raise plugin_error(name, claims[0], f"'{name}' is a built-in baseline, which a plugin may not replace (rename the entry point)")
        return builtin_class(name)
    if len(claims) > 1:
        others = "; ".join(plugin_label(entry_point) for entry_point in claims[1:])
        raise plugin_error(name, claims[0], f"the name is also registered by {others} (uninstall one, or rename its entry point)")
    if claims:
        return plugin_class(name, claims[0])
    broken = sorted(unusable_baselines())
    also = f"; broken plugins, ask for one to see why: {', '.join(broken)}" if broken else ""
    raise OffbenchError(f"unknown baseline '{name}' (known: {', '.join(baseline_names())}{also})")


def baseline_names() -> list[str]:
    """Every name `get_baseline` accepts, sorted: the built-ins and the plugins that load (their modules are imported)."""
    unusable = unusable_baselines()
    return sorted(name for name in {*BASELINES, *plugin_entry_points()} if name not in unusable)


def unusable_baselines() -> dict[str, str]:
    """Registered name -> the one-line error `get_baseline` gives for it: the plugins that are broken, or whose
    name is taken."""
    problems = {}
    for name in plugin_entry_points():
        try:
            get_baseline(name)
        except OffbenchError as exc:
            problems[name] = str(exc)
    return problems


def baseline_origin(name: str) -> dict[str, Any]:
    """Where baseline `name` comes from, as run.json's `method` records it (offbench/tracking/provenance.py):
    {"kind": "built-in", "name": ...} or {"kind": "plugin", "name": ..., "distribution": ..., "version": ...,
    "entry_point": "pkg.module:Class"}."""
    get_baseline(name)  # unknown, clashing and broken names are errors here too
    if name in BASELINES:
        return {"kind": "built-in", "name": name}
    entry_point = plugin_entry_points()[name][0]
    distribution, version = distribution_of(entry_point)
    return {"kind": "plugin", "name": name, "distribution": distribution, "version": version, "entry_point": entry_point.value}


def builtin_class(name: str) -> type:
    module = importlib.import_module(BASELINES[name])
    classes = [obj for obj in vars(module).values() if isinstance(obj, type) and getattr(obj, "name", None) == name]
    if len(classes) != 1:
        raise RuntimeError(f"{module.__name__} must define exactly one class with name = {name!r}, found {len(classes)}")
    return classes[0]


@functools.cache
def plugin_entry_points() -> dict[str, tuple[EntryPoint, ...]]:
    """Plugin name -> the entry points registering it (two or more: a clash), read once per process (code that
    changes sys.path later calls `plugin_entry_points.cache_clear()`)."""
    from importlib.metadata import entry_points

    found: dict[str, tuple[EntryPoint, ...]] = {}
    for entry_point in entry_points(group=PLUGIN_GROUP):
        found[entry_point.name] = (*found.get(entry_point.name, ()), entry_point)
    return found


def plugin_class(name: str, entry_point: EntryPoint) -> type:
    """The class `entry_point` names, once it imports and meets the class-level contract."""
    try:
        cls = entry_point.load()
    except Exception as exc:  # noqa: BLE001 - a broken package is one line naming it, not a traceback
        first_line = (str(exc).strip().splitlines() or [""])[0]
        raise plugin_error(name, entry_point, f"cannot import it ({type(exc).__name__}: {first_line})") from None
    problems = contract_problems(cls, name)
    if problems:
        raise plugin_error(name, entry_point, "; ".join(problems))
    return cls


def contract_problems(cls: Any, name: str | None = None) -> list[str]:
    """What keeps `cls` from being a baseline (registered as `name`, when given), as short phrases; empty when
    nothing does. The class-level part of the contract: `offbench.testing.check_baseline` checks the rest by
    training the class."""
    from offbench.data.samplers import SAMPLERS
    from offbench.evaluation.protocols import PROTOCOLS

    if not isinstance(cls, type):
        return [f"{cls!r} is not a class"]
    own_name = getattr(cls, "name", None)
    problems = []
    if not isinstance(own_name, str) or not own_name:
        problems.append("it has no class attribute name (a string)")
    elif name is not None and own_name != name:
        problems.append(f"its class attribute name is '{own_name}', not the registered '{name}'")
    config = getattr(cls, "Config", None)
    config_fields = (
        {field.name for field in dataclasses.fields(config)} if isinstance(config, type) and dataclasses.is_dataclass(config) else None
    )
    if config_fields is None:
        problems.append("it has no Config dataclass (class attribute Config)")
    missing = [
        attribute for attribute in ("sampler", "action_kinds", "evaluation_protocols", "return_conditioned") if not hasattr(cls, attribute)
    ]
    missing += [method for method in METHODS if not callable(getattr(cls, method, None))]
    if missing:
        problems.append(f"it lacks {', '.join(missing)}")
    sampler = getattr(cls, "sampler", None)
    if "sampler" not in missing and sampler not in SAMPLERS:
        problems.append(f"its sampler {sampler!r} is not registered (known: {', '.join(sorted(SAMPLERS))})")
    for attribute, allowed in (("action_kinds", ACTION_KINDS), ("evaluation_protocols", tuple(PROTOCOLS))):
        value = getattr(cls, attribute, None)
        if attribute not in missing and not (isinstance(value, (tuple, list)) and value and set(value) <= set(allowed)):
            problems.append(f"its {attribute} must be a non-empty tuple of {', '.join(allowed)}, got {value!r}")
    return_conditioned = getattr(cls, "return_conditioned", None)
    if "return_conditioned" not in missing and not isinstance(return_conditioned, bool):
        problems.append(f"its return_conditioned must be true or false, got {return_conditioned!r}")
    tiny = getattr(cls, "tiny_config", {})  # optional: tests' and check_baseline's small model
    unknown = sorted(set(tiny) - config_fields) if config_fields is not None and isinstance(tiny, dict) else []
    if not isinstance(tiny, dict):
        problems.append(f"its tiny_config must be a dict of Config fields, got {tiny!r}")
    elif unknown:
        problems.append(f"its tiny_config sets {', '.join(unknown)}, not fields of its Config")
    return problems


def distribution_of(entry_point: EntryPoint) -> tuple[str | None, str | None]:
    """(name, version) of the installed distribution that declares `entry_point`."""
    dist = entry_point.dist
    return (dist.name, dist.version) if dist is not None else (None, None)


def plugin_label(entry_point: EntryPoint) -> str:
    """'<distribution> <version>, <module:Class>': how messages name a plugin."""
    distribution, version = distribution_of(entry_point)
    return f"{distribution} {version}, {entry_point.value}" if distribution else entry_point.value


def plugin_error(name: str, entry_point: EntryPoint, problem: str) -> OffbenchError:
    return OffbenchError(f"plugin baseline '{name}' ({plugin_label(entry_point)}): {problem}")
