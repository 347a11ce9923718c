"""`offbench sweep SPEC --submit B`: a refused submission is reported with the leaderboard's reason and exits 1;
runs already on the board (the same runs, whatever their names) are skipped."""

from __future__ import annotations

import tomli_w

SPEC = (
    'name = "t"\nbaselines = ["bc"]\ndatasets = ["pendulum-scripted"]\nseeds = [0]\n'
    "[set]\nsteps = 10\neval_every = 10\neval_episodes = 1\nlog_every = 10\ncheckpoint_every = 10\n"
)


def board(tmp_path, monkeypatch):
    root = tmp_path / "leaderboards"
    monkeypatch.setenv("OFFBENCH_LEADERBOARDS", str(root))
    (root / "tb").mkdir(parents=True)
    (root / "tb" / "benchmark.toml").write_text(
        tomli_w.dumps(
            {
                "title": "t",
                "description": "Made by the tests.",
                "datasets": ["pendulum-scripted"],
                "metric": "normalized_score",
                "score": "final",
                "min_seeds": 1,
                "bootstrap_reps": 100,
                "evaluation": {"episodes": 1, "every_steps": 10, "steps": 10},
            }
        )
    )
    return root / "tb"


def sweep(cli, tmp_path, runs, spec_text):
    spec = tmp_path / f"{runs}.toml"
    spec.write_text(spec_text)
    return cli("sweep", spec, "--runs", tmp_path / runs, "--submit", "tb")


def test_a_refused_submission_names_its_reason_and_exits_1(cli, tmp_path, pendulum, monkeypatch):
    folder = board(tmp_path, monkeypatch)
    code, out, err = sweep(cli, tmp_path, "first", SPEC)
    assert code in (0, None), err
    assert "1 entry accepted on tb" in err
    entries = sorted((folder / "entries").glob("*.json"))
    assert len(entries) == 1

    code, out, err = sweep(cli, tmp_path, "first", SPEC)  # the same runs again: nothing to do, not an error
    assert code in (0, None) and "already on leaderboard tb" in err, err

    # Another sweep, same run names, another config for the same row: refused by the leaderboard, not "already on it".
    code, out, err = sweep(cli, tmp_path, "second", SPEC.replace("steps = 10\n", "steps = 10\nlearning_rate = 0.002\n", 1))
    assert code == 1, err
    assert "already on leaderboard" not in err
    assert "refused" in err and "another config" in err, err
    assert sorted((folder / "entries").glob("*.json")) == entries


def test_a_local_copy_off_the_boards_pin_is_refused_before_any_training(cli, tmp_path, pendulum, monkeypatch):
    folder = board(tmp_path, monkeypatch)
    text = (folder / "benchmark.toml").read_text()
    pinned = "ab" * 32  # not the local copy's content
    kernels = '{ torch_cpu_capability = "AVX512", numpy_simd = ["X86_V4"] }'
    (folder / "benchmark.toml").write_text(
        f'{text}\n[dataset_checksums]\n"pendulum-scripted" = "{pinned}"\n[dataset_made_on]\n"pendulum-scripted" = {kernels}\n'
    )
    code, out, err = sweep(cli, tmp_path, "first", SPEC)
    assert code == 2, err
    line = err.strip()
    assert "\n" not in line and line.startswith("offbench: error: --submit tb: ") and "pendulum-scripted/data.h5: " in line
    assert f"content sha256 {pendulum.content_sha256()[:12]}... is not the {pinned[:12]}... leaderboard 'tb' pins" in line
    assert "generated where torch_cpu_capability is AVX512" in line
    assert not (tmp_path / "first").exists()
