"""The README's main job, end to end on a tiny budget: every stage runs and leaves its artefacts."""

import json


def test_quickstart_walks_the_whole_data_flow(run_cli, tmp_path):
    out = tmp_path / "qs"
    proc = run_cli("quickstart", "--out", out, "--steps", "20", check=True)
    assert "ad_windows  batch" in proc.stdout and "dpt         batch" in proc.stdout
    assert (out / "darkroom-source-learning-curve.png").stat().st_size > 10_000
    for seed in (0, 1, 2):
        summary = json.loads((out / "runs" / f"bc-pendulum-scripted-s{seed}" / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["steps"] == 20
    board = out / "leaderboards" / "pendulum-scripted"
    assert len(list((board / "entries").glob("*.json"))) == 1
    assert "| bc | offbench | yes |" in (board / "README.md").read_text()  # submitted with --verify: replayed from checkpoints
    assert (board / "index.html").exists() and (board / "figures" / "curves.svg").exists()


def test_quickstart_refuses_a_non_empty_folder(run_cli, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    proc = run_cli("quickstart", "--out", tmp_path)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert (tmp_path / "keep.txt").read_text() == "mine"
