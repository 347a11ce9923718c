"""The baseline tables of README.md and baselines/README.md, made from the registry (each built-in class's
`summary`, protocols, action kinds and module), so that a new baseline module appears in them by being there.

    python -m offbench.baselines.tables          # rewrite both tables in this checkout
    python -m offbench.baselines.tables --check  # exit 1 if either is stale (what the tests check)

Each table sits between two marker comments in its file; everything else in the files is left alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

from offbench.baselines import BASELINES, get_baseline
from offbench.utils import atomic_write_text

PROTOCOL_ORDER = ("single-task", "multi-task", "in-context")
START = "<!-- baselines table ({}): made by python -m offbench.baselines.tables from the registry -->"
END = "<!-- end of the baselines table -->"


def builtin_classes() -> list[type]:
    """The built-in baseline classes, those of single-task data first, then multi-task only, then in-context; by name within."""
    classes = [get_baseline(name) for name in BASELINES]
    return sorted(classes, key=lambda cls: (PROTOCOL_ORDER.index(cls.evaluation_protocols[0]), cls.name))


def source_file(cls: type) -> str:
    return f"`{cls.__module__.replace('.', '/')}.py`"


def all_baselines_table() -> str:
    """README.md's: every built-in, how it is evaluated and on which actions."""
    rows = [
        f"| `{cls.name}` | {cls.summary} | {', '.join(cls.evaluation_protocols)} | {', '.join(cls.action_kinds)} | {source_file(cls)} |"
        for cls in builtin_classes()
    ]
    return "\n".join(["| baseline | what | evaluated | actions | file |", "|---|---|---|---|---|", *rows])


def multi_task_table() -> str:
    """baselines/README.md's: the baselines that exist for multi-task data only."""
    rows = [
        f"| `{cls.name}` | {cls.summary} | {source_file(cls)} |"
        for cls in builtin_classes()
        if tuple(cls.evaluation_protocols) == ("multi-task",)
    ]
    return "\n".join(["| baseline | what | file |", "|---|---|---|", *rows])


TABLES = {"README.md": ("all", all_baselines_table), "baselines/README.md": ("multi-task", multi_task_table)}


def with_table(text: str, label: str, table: str, where: str) -> str:
    """`text` with the table between its markers replaced by `table`."""
    start = START.format(label)
    if text.count(start) != 1 or text.count(END) < 1:
        raise ValueError(f"{where}: needs one '{start}' line, and '{END}' after it")
    head, rest = text.split(start + "\n", 1)
    return f"{head}{start}\n{table}\n{END}{rest.split(END, 1)[1]}"


def stale_files(root: Path, write: bool) -> list[str]:
    """The files under `root` whose table is not the registry's (rewritten when `write`)."""
    stale = []
    for relative, (label, make) in TABLES.items():
        path = root / relative
        text = path.read_text(encoding="utf-8")
        current = with_table(text, label, make(), str(path))
        if current != text:
            stale.append(relative)
            if write:
                atomic_write_text(path, current)
    return stale


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    stale = stale_files(Path(__file__).resolve().parents[2], write=not check)
    for relative in stale:
        print(f"{relative}: baselines table {'is stale (run python -m offbench.baselines.tables)' if check else 'rewritten'}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
