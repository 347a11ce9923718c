"""Pages generated from the leaderboards: leaderboards/README.md lists every benchmark (from the specs, so a new
board cannot be left out), and docs/results.md's tables are the boards' own, regenerated from the entries.

When a test here fails after a submission or a new board, run `offbench leaderboard index` and commit the pages.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from offbench.errors import OffbenchError
from offbench.leaderboard.index import BLOCK, fill_page, index_markdown, page_boards, write_index
from offbench.leaderboard.spec import known_benchmarks, leaderboards_root
from offbench.leaderboard.table import BEHAVIOUR_LABEL

REPO = Path(__file__).resolve().parents[1]
RESULTS_PAGE = REPO / "docs" / "results.md"


def test_the_boards_index_is_generated_and_lists_every_board():
    text = (REPO / "leaderboards" / "README.md").read_text()
    assert text == index_markdown(), "leaderboards/README.md is out of date: run `offbench leaderboard index`"
    names = known_benchmarks()
    assert {"pendulum-scripted", "darkroom", "metaworld-mt10", "minigrid-mt"} <= set(names)
    for name in names:
        assert f"[`{name}`]({name}/)" in text


def test_results_page_matches_the_entries():
    text = RESULTS_PAGE.read_text()
    assert fill_page(text) == text, "docs/results.md's tables differ from the boards: run `offbench leaderboard index`"


def test_results_page_covers_every_board_and_says_how_each_row_was_made():
    text = RESULTS_PAGE.read_text()
    assert set(page_boards(text)) == set(known_benchmarks()), "every board has a table on docs/results.md"
    prose = BLOCK.sub("", text)  # outside the generated tables
    for match in BLOCK.finditer(text):
        labels = [
            line.split("|")[1].strip().replace("\\", "")
            for line in match["body"].splitlines()[2:]
            if line.startswith("| ") and "reported" not in line and BEHAVIOUR_LABEL not in line  # not runs made here
        ]
        for label in labels:
            assert f"`{label}`" in prose, f"docs/results.md: row {label} of {match['name']} has no line saying how it was made"


def _board_copy(tmp_path: Path, name: str = "pendulum-scripted") -> Path:
    root = tmp_path / "boards"
    shutil.copytree(leaderboards_root() / name, root / name, ignore=shutil.ignore_patterns("figures", "*.html", "*.lock"))
    return root


def test_a_new_board_joins_the_index(tmp_path, run_cli):
    root = _board_copy(tmp_path)
    assert run_cli("leaderboard", "index", "--root", root).returncode == 0
    assert "`pendulum-scripted`" in (root / "README.md").read_text()
    assert run_cli("leaderboard", "index", "--root", root, "--check").returncode == 0
    (root / "another").mkdir()
    shutil.copy(root / "pendulum-scripted" / "benchmark.toml", root / "another" / "benchmark.toml")
    check = run_cli("leaderboard", "index", "--root", root, "--check")
    assert check.returncode == 1 and "out of date" in check.stdout + check.stderr
    assert "`another`" not in (root / "README.md").read_text()  # --check writes nothing
    write_index(root)
    assert "[`another`](another/)" in (root / "README.md").read_text()


def test_a_page_block_is_the_boards_table(tmp_path, run_cli):
    root = _board_copy(tmp_path)
    page = tmp_path / "page.md"
    page.write_text("before\n<!-- board: pendulum-scripted -->\nstale\n<!-- end board -->\nafter\n")
    assert run_cli("leaderboard", "index", "--root", root, "--page", page).returncode == 0
    text = page.read_text()
    assert text.startswith("before\n<!-- board: pendulum-scripted -->\n| baseline | method | verified | pendulum-scripted |")
    assert "stale" not in text and text.endswith("<!-- end board -->\nafter\n")
    readme = (root / "pendulum-scripted" / "README.md").read_text()
    for row in re.findall(r"^\| .* \(n=\d+\) \|$", text, re.M):  # the same rows and cells as the board's own page
        assert row in readme
    assert fill_page(text, root) == text


def test_a_block_can_name_its_columns(tmp_path):
    root = _board_copy(tmp_path)
    ok = fill_page("<!-- board: pendulum-scripted datasets=pendulum-scripted -->\n<!-- end board -->", root)
    assert "| baseline | method | verified | pendulum-scripted |" in ok
    with pytest.raises(OffbenchError, match="no dataset"):
        fill_page("<!-- board: pendulum-scripted datasets=elsewhere -->\n<!-- end board -->", root)
    with pytest.raises(OffbenchError, match="unknown argument"):
        fill_page("<!-- board: pendulum-scripted colour=red -->\n<!-- end board -->", root)


def test_results_that_no_longer_match_the_entries_are_refused(tmp_path):
    root = _board_copy(tmp_path)
    results = root / "pendulum-scripted" / "results.json"
    data = json.loads(results.read_text())
    if not data["entries"]:
        pytest.skip("the pendulum-scripted board has no entries")
    data["entries"] = data["entries"][1:]  # an entry submitted after the last render
    results.write_text(json.dumps(data))
    with pytest.raises(OffbenchError, match="leaderboard render pendulum-scripted"):
        fill_page("<!-- board: pendulum-scripted -->\n<!-- end board -->", root)
    results.unlink()
    with pytest.raises(OffbenchError, match="does not match the entries"):
        fill_page("<!-- board: pendulum-scripted -->\n<!-- end board -->", root)
