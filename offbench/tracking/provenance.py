"""Where a run's method comes from, recorded in run.json `method` and carried into leaderboard entries.

    {"kind": "built-in", "name": "cql"}                                   offbench's own baselines
    {"kind": "plugin", "name": ..., "distribution": ..., "version": ..., "entry_point": "pkg.mod:Class"}
    {"kind": "own-code", "name": ..., "source": {...}, "load": {...}}    offbench.track: a user's training loop
    {"kind": "black-box", "name": ..., "source": {...}}                  offbench.evaluate: a policy, no training

`source` is the calling script's origin: the git repository it lives in (remote URL where one is set, commit,
dirty flag), else the installed distribution its module belongs to (name, version), plus the script's path and
sha256. `load` (own code only) names the function that rebuilds the policy from the run's checkpoint, which is
what lets a leaderboard replay the run.
"""

from __future__ import annotations

import hashlib
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

METHOD_KINDS = ("built-in", "plugin", "own-code", "black-box")
REPLAYABLE_KINDS = ("built-in", "plugin", "own-code")  # a checkpoint and importable code can rebuild the policy


def caller_frame(depth: int) -> Any:
    """The frame `depth` levels above the caller of this function (the user's script calling the public API)."""
    frame = inspect.currentframe()
    for _ in range(depth + 1):
        frame = frame.f_back if frame is not None else None
    return frame


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def source_of(frame: Any) -> dict[str, Any]:
    """The origin of the code running in `frame` (see the module docstring). `script` is the path inside the git
    repository where there is one (what another checkout of it finds), else the absolute path."""
    filename = frame.f_code.co_filename if frame is not None else None
    source: dict[str, Any] = {
        "script": None,
        "script_sha256": None,
        "repository": None,
        "git_commit": None,
        "git_dirty": None,
        "distribution": None,
        "version": None,
    }
    if not filename or not Path(filename).is_file():  # an interactive session or a notebook cell
        return source
    path = Path(filename).resolve()
    source["script"] = str(path)
    source["script_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    commit = _git(path.parent, "rev-parse", "HEAD")
    if commit:
        top = Path(_git(path.parent, "rev-parse", "--show-toplevel") or path.parent)
        source["script"] = str(path.relative_to(top)) if path.is_relative_to(top) else str(path)
        source["git_commit"] = commit
        source["git_dirty"] = bool(_git(path.parent, "status", "--porcelain", "--untracked-files=no"))
        source["repository"] = _git(path.parent, "remote", "get-url", "origin")  # None for a repository with no remote
        return source
    module = frame.f_globals.get("__name__", "") if frame is not None else ""
    source["distribution"], source["version"] = distribution_of(module)
    return source


def distribution_of(module: str) -> tuple[str | None, str | None]:
    """The installed distribution (name, version) that provides top-level module `module`, if any."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    top = module.split(".")[0]
    names = packages_distributions().get(top) or []
    if not names:
        return None, None
    try:
        return names[0], version(names[0])
    except PackageNotFoundError:
        return names[0], None


def loader_of(load: Callable[..., Any]) -> dict[str, Any]:
    """How to import `load` again later: its module and qualified name, and for a script run as `__main__` its file
    (absolute, and relative to its git repository so another checkout finds it from its top folder)."""
    module = getattr(load, "__module__", None)
    qualname = getattr(load, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        from offbench.errors import OffbenchError

        raise OffbenchError(
            f"checkpoint(load=...): {load!r} must be a module-level function or class (importable again "
            "to rebuild the policy), not a lambda or a nested function"
        )
    file = getattr(sys.modules.get(module), "__file__", None)
    spec: dict[str, Any] = {"module": module, "qualname": qualname, "file": None, "repository_file": None}
    if file:
        path = Path(file).resolve()
        spec["file"] = str(path)
        top = _git(path.parent, "rev-parse", "--show-toplevel")
        if top and path.is_relative_to(Path(top)):
            spec["repository_file"] = str(path.relative_to(Path(top)))
    return spec


def import_loader(spec: dict[str, Any]) -> Callable[..., Any]:
    """The function `loader_of` recorded: imported by module name, or for a script (`__main__`) from its file: where
    it was, else at its path inside the repository under the current folder (a checkout of the same repository)."""
    import importlib

    from offbench.errors import OffbenchError

    module_name, qualname = spec.get("module"), spec.get("qualname")
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        raise OffbenchError("run.json method.load needs 'module' and 'qualname'")
    try:
        module = importlib.import_module(module_name) if module_name != "__main__" else _import_script(spec)
        target: Any = module
        for part in qualname.split("."):
            target = getattr(target, part)
    except OffbenchError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code that fails to import is one line, not a traceback
        raise OffbenchError(f"cannot import {module_name}:{qualname} ({exc.__class__.__name__}: {str(exc)[:160]})") from None
    return target


def _import_script(spec: dict[str, Any]) -> Any:
    """A script imported from its file under a name of its own, registered in sys.modules while it runs (dataclasses
    and pickling look a class's module up there); its `if __name__ == "__main__":` block does not run."""
    import importlib.util

    from offbench.errors import OffbenchError

    candidates = [spec.get("file"), spec.get("repository_file") and str(Path.cwd() / spec["repository_file"])]
    path = next((Path(c) for c in candidates if isinstance(c, str) and Path(c).is_file()), None)
    if path is None:
        raise OffbenchError(
            f"the script that defines {spec.get('qualname')} is not on this machine "
            f"({spec.get('file')}; nor {spec.get('repository_file')} under {Path.cwd()})"
        )
    name = "offbench_replayed_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    loaded = importlib.util.spec_from_file_location(name, path)
    if loaded is None or loaded.loader is None:
        raise OffbenchError(f"{path}: not a Python file that can be imported (the script that defines {spec.get('qualname')})")
    module = importlib.util.module_from_spec(loaded)
    sys.modules[name] = module
    try:
        loaded.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
