"""The rendered HTML leaderboard in a real headless Chromium: no console errors, sorting works, figures show."""

from __future__ import annotations

import pytest
from cdp import Browser, chromium_path
from run_dirs import make_bench, runs_of, write_benchmark

# Name order (bc, cql, iql) differs from score order (bc < cql < iql): sorting must move rows.
LEVELS = {"cql": 55.0, "bc": 40.0, "iql": 70.0}
REPORTED = {
    "label": "CQL <b>paper</b>",
    "source": {"paper": "A paper", "table": "Table 1", "version": "v2"},
    "scores": {"test/a": {"mean": 60.0, "std": 1.5}},
}


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (scripts/setup.sh --test installs Debian's chromium)")
def test_leaderboard_page_in_headless_chromium(tmp_path, monkeypatch):
    pytest.importorskip("websocket", reason="websocket-client (dev extra) drives Chromium over the DevTools protocol")
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    bench = make_bench(tmp_path, monkeypatch, LEVELS)
    write_benchmark(bench["root"], "tb", ["test/a", "test/b"], reported=[REPORTED], behaviour={"test/a": 50.0})
    spec = load_spec("tb")
    for baseline in LEVELS:
        submit(spec, runs_of(bench, baseline), render=baseline == "iql")
    page = bench["folder"] / "index.html"

    browser = Browser(tmp_path / "chromium-profile")
    try:
        browser.navigate(page.as_uri())
        rows = "Array.from(document.querySelectorAll('#scores tbody tr')).map(r => r.cells[0].textContent.trim())"
        ours = ["iql", "cql", "bc"]  # ranked best first
        assert browser.evaluate(rows) == [*ours, "behaviour policy (the data)", "CQL <b>paper</b> reported [1]"]  # escaped: shown as text
        for marked in ("tr.reported", "tr.data"):  # published numbers and the data's own row are set apart
            assert browser.evaluate(f"getComputedStyle(document.querySelector('#scores {marked} td')).fontStyle") == "italic"

        def click(header):
            box = browser.evaluate(
                "(() => { const th = Array.from(document.querySelectorAll('#scores thead th'))"
                f".find(h => h.textContent.trim() === '{header}'); th.scrollIntoView();"
                " const s = th.getBoundingClientRect(); return [s.x + s.width / 2, s.y + s.height / 2]; })()"
            )
            browser.click(*box)
            return [row for row in browser.evaluate(rows) if row in ours]

        assert click("baseline") == ["bc", "cql", "iql"]  # a text column: ascending first
        assert click("test/a") == ["iql", "cql", "bc"]  # a score column: best first (higher is better)
        assert click("test/a") == ["bc", "cql", "iql"]

        images = browser.evaluate("Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])")
        assert {src for src, _, _ in images} == {"figures/curves.svg", "figures/aggregates.svg", "figures/profiles.svg"}
        assert all(complete and width > 0 for _, complete, width in images), images

        assert browser.console_errors() == []
        shot = browser.screenshot(tmp_path / "leaderboard.png")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        print(f"screenshot: {shot}")
    finally:
        browser.close()
