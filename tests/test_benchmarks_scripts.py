"""Every benchmark script keeps working as a command and says what it is for: `--help` exits 0, and its docstring
states its question, its command at its own path and where its answer stands (a note that exists).

The scripts run in this process (`runpy`, as `python SCRIPT --help` would), so the heavy imports are paid once and
the whole file takes seconds; a script that no longer imports, or whose command line no longer parses, fails here.
"""

from __future__ import annotations

import ast
import re
import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
SCRIPTS = sorted([*BENCHMARKS.glob("speed/*.py"), *BENCHMARKS.glob("studies/*.py")])
NOTE = re.compile(r"(?:[\w./-]+/)?[\w.-]+\.md")


def test_the_two_folders_hold_the_scripts():
    assert {p.parent.name for p in SCRIPTS} == {"speed", "studies"}
    assert not list(BENCHMARKS.glob("*.py")) or [p.name for p in BENCHMARKS.glob("*.py")] == ["common.py"]
    assert len(SCRIPTS) >= 15


def _docstring(path: Path) -> str:
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring, f"{path.relative_to(REPO)} has no docstring"
    return docstring


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_docstring_gives_question_command_and_answer(path):
    docstring = _docstring(path)
    relative = path.relative_to(REPO).as_posix()
    assert "?" in docstring.split("\n\n")[0], f"{relative}: the docstring's first paragraph should ask its question"
    assert relative in docstring, f"{relative}: the docstring's command should name the script at its path"
    answer = re.search(r"^Answer: (.+?)(?:\n\n|\Z)", docstring, re.M | re.S)
    assert answer, f"{relative}: no 'Answer: ...' paragraph saying where the answer stands"
    notes = NOTE.findall(answer.group(1))
    assert notes, f"{relative}: the Answer paragraph names no note"
    for note in notes:
        candidates = [REPO / note, BENCHMARKS / "studies" / note, BENCHMARKS / "speed" / note]
        assert any(c.is_file() for c in candidates), f"{relative}: its answer points at {note}, which does not exist"


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_help_exits_zero(path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    monkeypatch.setattr(sys, "path", list(sys.path))  # the scripts put the checkout first; undo it after
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(path), run_name="__main__")
    assert exited.value.code in (0, None), f"{path.name} --help exited {exited.value.code}"
    assert "usage" in capsys.readouterr().out.lower()


def test_the_index_lists_every_script_and_study():
    index = (BENCHMARKS / "README.md").read_text()
    for path in SCRIPTS:
        assert path.name in index, f"benchmarks/README.md does not list {path.relative_to(BENCHMARKS)}"
    for note in BENCHMARKS.glob("studies/*.md"):
        assert f"studies/{note.name}" in index, f"benchmarks/README.md does not list studies/{note.name}"
    speed = (BENCHMARKS / "speed" / "README.md").read_text()
    for path in BENCHMARKS.glob("speed/*.py"):
        assert path.name in speed, f"benchmarks/speed/README.md does not cover {path.name}"


def test_no_note_speaks_of_work_periods_or_one_machine():
    texts = {p: p.read_text() for p in [*BENCHMARKS.rglob("*.md"), *SCRIPTS, BENCHMARKS / "common.py"]}
    for path, text in texts.items():
        assert not re.search(r"\b[Ss]essions? \d", text), f"{path.relative_to(REPO)} speaks of a work period"
        assert not re.search(r"\bissue \d|#\d{2,}", text), f"{path.relative_to(REPO)} names an issue number"
        assert "/work/" not in text and "/home/" not in text, f"{path.relative_to(REPO)} names a path of one machine"


def test_common_prints_a_markdown_table(capsys):
    from benchmarks.common import markdown_table, print_table, speedup

    assert markdown_table([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]) == "| a | b |\n|---|---|\n| 1 | x |\n| 2 | y |"
    assert speedup(3.0, 2.0) == "1.50x"
    print_table([{"side": "ours", "rate": 2}], "title")
    out = capsys.readouterr().out
    assert "title" in out and "measured" in out and "| ours | 2 |" in out
