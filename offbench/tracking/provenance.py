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
    """The origin of the code running in `frame` (see the module docstring)."""
    filename = frame.f_code.co_filename if frame is not None else None
    source: dict[str, Any] = {"script": None, "script_sha256": None, "repository": None, "git_commit": None,
                              "git_dirty": None, "distribution": None, "version": None}
    if not filename or not Path(filename).is_file():  # an interactive session or a notebook cell
        return source
    path = Path(filename).resolve()
    source["script"] = str(path)
    source["script_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    commit = _git(path.parent, "rev-parse", "HEAD")
    if commit:
        source["git_commit"] = commit
        source["git_dirty"] = bool(_git(path.parent, "status", "--porcelain", "--untracked-files=no"))
        source["repository"] = _git(path.parent, "remote", "get-url", "origin") or _git(path.parent, "rev-parse", "--show-toplevel")
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
    """How to import `load` again later: its module and qualified name, and its file for scripts run as __main__."""
    module = getattr(load, "__module__", None)
    qualname = getattr(load, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        from offbench.errors import OffbenchError

        raise OffbenchError(f"checkpoint(load=...): {load!r} must be a module-level function or class (importable again "
                            "to rebuild the policy), not a lambda or a nested function")
    file = getattr(sys.modules.get(module), "__file__", None)
    return {"module": module, "qualname": qualname, "file": str(Path(file).resolve()) if file else None}


def import_loader(spec: dict[str, Any]) -> Callable[..., Any]:
    """The function `loader_of` recorded: imported by module name, or from its file for a script (`__main__`)."""
    import importlib
    import importlib.util

    from offbench.errors import OffbenchError

    module_name, qualname, file = spec.get("module"), spec.get("qualname"), spec.get("file")
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        raise OffbenchError("run.json method.load needs 'module' and 'qualname'")
    try:
        if module_name != "__main__":
            module = importlib.import_module(module_name)
        elif isinstance(file, str) and Path(file).is_file():
            loaded = importlib.util.spec_from_file_location("offbench_replayed_script", file)
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)  # the script's `if __name__ == "__main__":` block does not run
        else:
            raise OffbenchError(f"the script {file} that defines {qualname} is not on this machine")
        target: Any = module
        for part in qualname.split("."):
            target = getattr(target, part)
    except OffbenchError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code that fails to import is one line, not a traceback
        raise OffbenchError(f"cannot import {module_name}:{qualname} ({exc.__class__.__name__}: {str(exc)[:160]})") from None
    return target
