"""Bad input on every command of the CLI: one line on stderr starting `offbench: error:`, exit code 2, no
traceback, and not a byte (nor a folder) changed on disk. Table-driven: each case is a command line against
one hostile input (a user card, a doctored dataset file, a bad run directory, an OFFBENCH_HOME or --out that
cannot be written, a value out of range). Runs `offbench.cli.main` in-process (a subprocess per case would
cost a second each); a traceback escapes main() as an exception and fails the test."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass

import gymnasium as gym
import h5py
import numpy as np
import pytest
import typer
from helpers import make_store

from offbench import cli
from offbench.data.store import EpisodeStore
from offbench.paths import builtin_dir

RECIPE_CARD = """id = "mine/bad-recipe"
description = "x"
format = "offbench"
[source.recipe]
generator = "darkroom"
seed = {seed}
params = {params}
"""
FILES_CARD = """id = "{id}"
description = "x"
format = "d4rl"
[[source.files]]
url = "{url}"
{extra}
"""
MINARI_CARD = """id = "mine/minari"
description = "x"
format = "minari"
[source]
minari_id = "{minari_id}"
"""
LONG = "a" * 300  # longer than a file name may be (255 bytes on common filesystems)


def files_card(extra: str = "", url: str = "https://example.invalid/x.hdf5", id: str = "mine/files") -> str:
    return FILES_CARD.format(id=id, url=url, extra=extra)


def doctor(source, target, edit):
    """A copy of a native file with `edit(h5py.File)` applied: what a buggy writer or a hand edit leaves."""
    target.write_bytes(source.read_bytes())
    with h5py.File(target, "r+") as f:
        edit(f)


def replace(name, value):
    def edit(f):
        del f[name]
        f[name] = value

    return edit


def set_element(name, index, value):
    def edit(f):
        arr = f[name][()]
        arr[index] = value
        f[name][...] = arr

    return edit


def set_attr(name, value):
    def edit(f):
        f.attrs[name] = value

    return edit


def discrete_store() -> EpisodeStore:
    episodes = [
        {
            "observations": np.zeros((length + 1, 2), np.float32),
            "actions": np.arange(length) % 3,
            "rewards": np.ones(length),
            "terminations": np.arange(length) == length - 1,
            "truncations": np.zeros(length, bool),
        }
        for length in (3, 4)
    ]
    return EpisodeStore.from_episodes(
        episodes, observation_space=gym.spaces.Box(-1, 1, (2,), np.float32), action_space=gym.spaces.Discrete(3)
    )


DOCTORED = {  # file name -> edit of the good native file (10 steps, 3 episodes, 4-d observations, 2-d actions)
    "nan-rewards.h5": set_element("rewards", 3, np.nan),
    "inf-observation.h5": set_element("observations", (2, 1), np.inf),
    "inf-final-observation.h5": set_element("final_observations", (1, 0), -np.inf),
    "rewards-2d.h5": replace("rewards", np.zeros((10, 1), np.float32)),
    "final-obs-shape.h5": replace("final_observations", np.zeros((3, 5), np.float32)),
    "float-terminations.h5": replace("terminations", np.zeros(10, np.float32)),
    "string-rewards.h5": replace("rewards", np.array(["x"] * 10, dtype=h5py.string_dtype())),
    "version-text.h5": set_attr("format_version", "abc"),
    "card-number.h5": set_attr("card", 5),
    "card-list.h5": set_attr("card", "[1]"),
    "space-list.h5": set_attr("observation_space", "[1, 2]"),
    "space-shape.h5": set_attr(
        "observation_space", json.dumps({"type": "Box", "shape": [7], "dtype": "float32", "low": -1.0, "high": 1.0})
    ),
}


@pytest.fixture(scope="module")
def hostile_inputs(tmp_path_factory):
    """The hostile inputs, made once per module (a copy goes to each test)."""
    tmp_path = tmp_path_factory.mktemp("hostile")
    native = make_store().save(tmp_path / "data" / "data.h5")
    (tmp_path / "truncated.h5").write_bytes(native.read_bytes()[:3000])
    with h5py.File(tmp_path / "one-row-timeouts.hdf5", "w") as f:  # every episode one row, ended by a timeout
        for key, value in {
            "observations": np.zeros((3, 2)),
            "actions": np.zeros((3, 1)),
            "rewards": np.zeros(3),
            "terminals": np.zeros(3, bool),
            "timeouts": np.ones(3, bool),
        }.items():
            f[key] = value
    for name, edit in DOCTORED.items():
        doctor(native, tmp_path / name, edit)
    discrete = discrete_store().save(tmp_path / "discrete.h5")
    doctor(discrete, tmp_path / "discrete-out-of-range.h5", set_element("actions", 5, 7))
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "data.h5").write_bytes(b"someone else's data")
    (tmp_path / "bad.toml").write_text("steps = [")
    (tmp_path / "latin1.toml").write_bytes("steps = 10  # caf\u00e9\n".encode("latin-1"))
    (tmp_path / "afile").write_text("a file, not a folder\n")
    for name, text in {"partial": '{"schema": 1, "baseline": "bc"}', "mistyped": None, "list": "[1]", "latin1": None}.items():
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "run.json").write_bytes((text or "").encode())
    full = {
        "schema": 1,
        "run_id": "x",
        "baseline": "bc",
        "seed": 0,
        "config": {},
        "code": {"version": "0"},
        "dataset": {"id": "x", "path": "/x", "content_sha256": "0" * 64},
        "env": {"device": "cpu"},
        "evaluation": {"target_returns": None, "episodes": 1, "every_steps": 1},
    }
    (tmp_path / "runs" / "mistyped" / "run.json").write_text(json.dumps({**full, "seed": "zero"}))
    (tmp_path / "runs" / "resumes-text").mkdir()
    (tmp_path / "runs" / "resumes-text" / "run.json").write_text(json.dumps({**full, "resumes": "twice"}))
    (tmp_path / "boards" / "pendulum-scripted").mkdir(parents=True)  # a private leaderboard root (OFFBENCH_LEADERBOARDS)
    shutil.copy(builtin_dir("leaderboards") / "pendulum-scripted" / "benchmark.toml", tmp_path / "boards" / "pendulum-scripted")
    (tmp_path / "runs" / "latin1" / "run.json").write_bytes(
        json.dumps({**full, "baseline": "caf\u00e9"}, ensure_ascii=False).encode("latin-1")
    )
    return tmp_path


@pytest.fixture
def world(hostile_inputs, tmp_path, isolated_home, monkeypatch):
    """A copy of the hostile inputs under tmp_path (which also holds OFFBENCH_HOME); the tests run from there."""
    shutil.copytree(hostile_inputs, tmp_path, dirs_exist_ok=True)
    (isolated_home / "datasets").mkdir(parents=True)
    monkeypatch.setenv("OFFBENCH_LEADERBOARDS", str(tmp_path / "boards"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def snapshot(folder):
    """Every folder and file under `folder` with the file's mode and content hash; empty `*.lock` files are
    left out (filelock keeps them, empty, by design)."""
    return {
        str(p): ("dir",) if p.is_dir() else (p.stat().st_mode, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(folder.rglob("*"))
        if not (p.suffix == ".lock" and p.is_file() and p.stat().st_size == 0)
    }


@dataclass(frozen=True)
class Case:
    argv: list[str]  # {tmp} stands for the test folder
    fragment: str  # part of the one-line message
    card: str | bytes | None = None  # a user card, written to $OFFBENCH_HOME/datasets/<card_name>
    card_name: str = "mine/user.toml"
    home: str | None = None  # OFFBENCH_HOME for this case ({tmp} allowed)


DATA = "{tmp}/data/data.h5"
RUN = ["run", "baseline", "bc", "--dataset", DATA, "--out", "{tmp}/new-runs"]
DT_RUN = ["run", "baseline", "dt", "--dataset", DATA, "--out", "{tmp}/new-runs"]
IQL_RUN = ["run", "baseline", "iql", "--dataset", DATA, "--out", "{tmp}/new-runs"]
GENERATE = ["generate", "darkroom", "--tasks", "2", "--episodes", "5", "-q"]

CASES = {
    # ---- cards: malformed, non-UTF-8, values out of range, names that would leave their folder
    "malformed-card-asked-for": Case(["info", "mine/user"], "malformed TOML", card='id = "x'),
    "broken-card-overriding-a-builtin": Case(
        ["info", "pendulum-scripted"], "malformed TOML", card="id = [", card_name="pendulum-scripted.toml"
    ),
    "card-not-utf8": Case(["info", "mine/user"], "card is not UTF-8", card='id = "mine/user"  # caf\u00e9\n'.encode("latin-1")),
    "recipe-seed-not-int": Case(
        ["info", "mine/bad-recipe"],
        "'source.recipe.seed' must be an integer, got 'abc'",
        card=RECIPE_CARD.format(seed='"abc"', params="{}"),
    ),
    "recipe-params-not-table": Case(
        ["download", "mine/bad-recipe"], "'source.recipe.params' must be a table, got 'x'", card=RECIPE_CARD.format(seed=0, params='"x"')
    ),
    "score-is-boolean": Case(
        ["info", "mine/files"],
        "'scores.ref_min' must be a finite number, got True",
        card=files_card("[scores]\nref_min = true\nref_max = 1.0"),
    ),
    "size-negative": Case(["download", "mine/files"], "'source.files[0].size' must be at least 1, got -5", card=files_card("size = -5")),
    "size-zero": Case(["download", "mine/files"], "'source.files[0].size' must be at least 1, got 0", card=files_card("size = 0")),
    "size-not-a-number": Case(
        ["download", "mine/files"], "'source.files[0].size' must be an integer, got 'big'", card=files_card('size = "big"')
    ),
    "sha256-not-hex": Case(
        ["download", "mine/files"], "'source.files[0].sha256' must be 64 hex characters", card=files_card(f'sha256 = "{"z" * 64}"')
    ),
    "url-climbs-out-of-raw": Case(
        ["download", "mine/files"], "is not a safe file name", card=files_card(url="http://example.invalid/a/..%2F..%2F..%2Fx")
    ),
    "url-name-too-long": Case(
        ["download", "mine/files"], "is not a safe file name", card=files_card(url=f"http://example.invalid/{LONG}.h5")
    ),
    "card-id-climbs": Case(["info", "mine/user"], "'id' part '..' is not a safe file name", card=files_card(id="../../evil")),
    "card-id-too-long": Case(["info", "mine/user"], "is not a safe file name", card=files_card(id=f"mine/{LONG}")),
    "minari-id-climbs": Case(
        ["download", "mine/minari"], "component '..' is not a safe file name", card=MINARI_CARD.format(minari_id="mujoco/../../x-v0")
    ),
    "list-unknown-kind": Case(["list", "--kind", "offlin"], "no dataset of that kind"),
    "unknown-id": Case(["info", "nope/nothing"], "unknown dataset id"),
    "download-unknown": Case(["download", "nope"], "unknown dataset id"),
    # ---- OFFBENCH_HOME that cannot hold data: checked before any work
    "home-is-a-file-download": Case(["download", "darkroom-small"], "afile is not a folder", home="{tmp}/afile"),
    "home-under-a-file-info": Case(["info", "darkroom-small"], "afile is not a folder", home="{tmp}/afile/home"),
    "home-is-a-file-generate": Case(GENERATE, "afile is not a folder", home="{tmp}/afile"),
    # ---- dataset files: structure, values and attributes that no baseline could train on
    "missing-path": Case(["verify", "{tmp}/absent.h5"], "no such file"),
    "truncated-file": Case(["verify", "{tmp}/truncated.h5"], "truncated"),
    "d4rl-nothing-left": Case(["info", "{tmp}/one-row-timeouts.hdf5"], "one-row-timeouts.hdf5: every episode has one row"),
    "nan-reward": Case(["verify", "{tmp}/nan-rewards.h5"], "nan-rewards.h5: rewards[3] is not finite (nan)"),
    "inf-observation": Case(["verify", "{tmp}/inf-observation.h5"], "observations[2] is not finite"),
    "inf-final-observation": Case(["info", "{tmp}/inf-final-observation.h5"], "final_observations[1] is not finite"),
    "rewards-2d": Case(["verify", "{tmp}/rewards-2d.h5"], "rewards must have one value per step, got shape (10, 1)"),
    "final-observation-shape": Case(["verify", "{tmp}/final-obs-shape.h5"], "final_observations rows have shape (5,), observations (4,)"),
    "float-terminations": Case(["verify", "{tmp}/float-terminations.h5"], "terminations must be an array of booleans, got dtype float32"),
    "string-rewards": Case(["verify", "{tmp}/string-rewards.h5"], "rewards must be an array of numbers"),
    "action-outside-discrete": Case(["verify", "{tmp}/discrete-out-of-range.h5"], "actions[5] = 7 is outside the action space Discrete(3)"),
    "version-attr-text": Case(["info", "{tmp}/version-text.h5"], "attribute format_version must be an integer, got 'abc'"),
    "card-attr-number": Case(["verify", "{tmp}/card-number.h5"], "attribute card must be a string"),
    "card-attr-list": Case(["verify", "{tmp}/card-list.h5"], "attribute card must hold a JSON object"),
    "space-attr-list": Case(["verify", "{tmp}/space-list.h5"], "a space must be a JSON object"),
    "space-shape-differs": Case(["verify", "{tmp}/space-shape.h5"], "observations rows have shape (4,), but the observation space is Box"),
    "run-on-nan-rewards": Case(
        ["run", "baseline", "bc", "--dataset", "{tmp}/nan-rewards.h5", "--out", "{tmp}/new-runs"], "rewards[3] is not finite"
    ),
    # ---- export and generate: where they would write
    "export-unknown-format": Case(["export", DATA, "--format", "rlds", "--out", "{tmp}/x"], "unknown format"),
    "export-over-existing": Case(["export", DATA, "--format", "offbench", "--out", "{tmp}/used"], "already exists"),
    "export-out-is-a-file": Case(["export", DATA, "--format", "d4rl", "--out", "{tmp}/afile"], "afile is not a folder"),
    "export-out-dev-null": Case(["export", DATA, "--format", "offbench", "--out", "/dev/null"], "/dev/null is not a folder"),
    "export-minari-out-is-a-file": Case(["export", DATA, "--format", "minari", "--out", "{tmp}/afile/x"], "afile is not a folder"),
    "export-name-too-long": Case(["export", DATA, "--format", "offbench", "--out", f"{{tmp}}/{LONG}"], "File name too long"),
    "generate-zero-tasks": Case(["generate", "darkroom", "--tasks", "0"], "tasks must be at least 1"),
    "generate-not-an-int": Case(["generate", "keydoor", "--tasks", "two"], "--tasks"),
    "generate-wrong-algo": Case(["generate", "bandit", "--tasks", "2", "--algo", "q-learning"], "unknown algorithm"),
    "generate-over-existing": Case([*GENERATE, "--out", "{tmp}/used"], "already exists"),
    "generate-out-dev-null": Case([*GENERATE, "--out", "/dev/null"], "--out must be a folder"),
    "generate-out-under-a-file": Case([*GENERATE, "--out", "{tmp}/afile/x"], "afile is not a folder"),
    "generate-out-too-long": Case([*GENERATE, "--out", f"{{tmp}}/{LONG}"], "File name too long"),
    "generate-multitask-out-under-a-file": Case(
        ["generate", "minigrid", "--suite", "MT3", "--episodes", "2", "--out", "{tmp}/afile/x", "--quiet"], "afile is not a folder"
    ),
    "generate-multitask-id-climbs": Case(
        ["generate", "minigrid", "--suite", "MT3", "--episodes", "2", "--id", "../../mine", "--quiet"],
        "'id' part '..' is not a safe file name",
    ),
    "quickstart-out-is-a-file": Case(["quickstart", "--out", "{tmp}/afile"], "afile is not a folder"),
    # ---- run: config values out of range are refused before the run directory exists
    "run-unknown-baseline": Case(["run", "baseline", "nope", "--dataset", DATA], "unknown baseline"),
    "run-negative-seed": Case([*RUN, "--seed", "-1"], "--seed"),
    "run-unknown-key": Case([*RUN, "--set", "nope=1"], "unknown config key"),
    "run-bad-value": Case([*DT_RUN, "--set", "steps=x"], "must be an integer"),
    "run-nan-learning-rate": Case([*RUN, "--set", "learning_rate=nan"], "'learning_rate' must be a finite number, got nan"),
    "run-inf-learning-rate": Case([*RUN, "--set", "learning_rate=inf"], "'learning_rate' must be a finite number, got inf"),
    "run-negative-learning-rate": Case([*RUN, "--set", "learning_rate=-0.1"], "'learning_rate' must be greater than 0"),
    "run-negative-layers": Case([*RUN, "--set", "num_layers=-2"], "'num_layers' must be at least 0, got -2"),
    "run-zero-width": Case([*RUN, "--set", "hidden_dim=0"], "'hidden_dim' must be at least 1, got 0"),
    "run-negative-batch": Case([*RUN, "--set", "batch_size=-8"], "'batch_size' must be at least 1"),
    "run-dropout-one": Case([*DT_RUN, "--set", "attention_dropout=1.0"], "'attention_dropout' must be at least 0 and less than 1"),
    "run-beta-out-of-range": Case([*DT_RUN, "--set", "betas=[0.9, 1.5]"], "'betas' must be at least 0 and less than 1"),
    "run-zero-heads": Case([*DT_RUN, "--set", "num_heads=0"], "'num_heads' must be at least 1"),
    "run-unknown-schedule": Case(
        [*IQL_RUN, "--set", "actor_lr_schedule=sometimes"], "'actor_lr_schedule' must be one of cosine, linear, constant"
    ),
    "run-expectile-one": Case([*IQL_RUN, "--set", "expectile=1"], "'expectile' must be greater than 0 and less than 1"),
    "run-too-many-eval-episodes": Case([*RUN, "--set", "eval_episodes=5000"], "'eval_episodes' must be at least 0 and at most 1000"),
    "run-config-out-of-range": Case([*RUN, "--config", "{tmp}/latin1.toml"], "latin1.toml: config is not UTF-8"),
    "run-malformed-config": Case([*RUN, "--config", "{tmp}/bad.toml"], "malformed TOML"),
    "run-missing-config": Case([*RUN, "--config", "{tmp}/absent.toml"], "cannot read config"),
    "run-bad-device": Case([*RUN, "--device", "abacus"], "not a torch device"),
    "run-name-climbs": Case([*RUN, "--name", "../../escaped"], "--name '../../escaped' is not a safe file name"),
    "run-name-too-long": Case([*RUN, "--name", LONG], "is not a safe file name"),
    "run-out-is-a-file": Case(
        ["run", "baseline", "bc", "--dataset", DATA, "--out", "{tmp}/afile", "--set", "eval_episodes=0"], "afile is not a folder"
    ),
    "run-out-dev-null": Case(
        ["run", "baseline", "bc", "--dataset", DATA, "--out", "/dev/null", "--set", "eval_episodes=0"], "/dev/null is not a folder"
    ),
    # ---- resume and evaluate: run directories that are not, or only partly
    "resume-missing": Case(["run", "baseline", "bc", "--resume", "{tmp}/absent"], "not a run directory"),
    "resume-on-a-file": Case(["run", "baseline", "bc", "--resume", "{tmp}/afile"], "afile: not a run directory"),
    "resume-partial-run-json": Case(["run", "baseline", "bc", "--resume", "{tmp}/runs/partial"], "run.json: missing required key 'run_id'"),
    "resume-mistyped-run-json": Case(
        ["run", "baseline", "bc", "--resume", "{tmp}/runs/mistyped"], "run.json: 'seed' must be an integer, got 'zero'"
    ),
    "resume-run-json-resumes-text": Case(
        ["run", "baseline", "bc", "--resume", "{tmp}/runs/resumes-text"], "run.json: 'resumes' must be a list of tables, got 'twice'"
    ),
    "resume-run-json-not-utf8": Case(["run", "baseline", "bc", "--resume", "{tmp}/runs/latin1"], "run record is not UTF-8"),
    "resume-run-json-a-list": Case(["run", "baseline", "bc", "--resume", "{tmp}/runs/list"], "run.json must be a table, got [1]"),
    "evaluate-not-a-run": Case(["evaluate", "{tmp}/data"], "run.json"),
    "evaluate-a-file": Case(["evaluate", "{tmp}/afile"], "not a run directory"),
    "evaluate-partial-run-json": Case(["evaluate", "{tmp}/runs/partial"], "run.json: missing required key 'run_id'"),
    # ---- submit, leaderboard, plot: the same run directories (a private leaderboard root)
    "submit-a-file": Case(["submit", "{tmp}/afile", "--benchmark", "pendulum-scripted"], "afile: no such run directory"),
    "submit-partial-run-json": Case(["submit", "{tmp}/runs/partial", "--benchmark", "pendulum-scripted"], "partial: refused (run-files)"),
    "submit-run-json-not-utf8": Case(
        ["submit", "{tmp}/runs/latin1", "--benchmark", "pendulum-scripted"], "latin1: refused (schema): run.json is not valid JSON"
    ),
    "submit-unknown-benchmark": Case(["submit", "{tmp}/runs/partial", "--benchmark", "../../x"], "unknown benchmark '../../x'"),
    "leaderboard-unknown": Case(["leaderboard", "show", "nope"], "unknown benchmark 'nope'"),
    "leaderboard-render-out-is-a-file": Case(
        ["leaderboard", "render", "pendulum-scripted", "--out", "{tmp}/afile"], "afile is not a folder"
    ),
    "plot-missing-run": Case(["plot", "{tmp}/absent", "-o", "{tmp}/x.png"], "absent: no such file or folder"),
    "plot-partial-run": Case(["plot", "{tmp}/runs/partial", "-o", "{tmp}/x.png"], "partial: refused (run-files)"),
    "evaluate-too-many-episodes": Case(["evaluate", "{tmp}/data", "--episodes", "5000"], "between 1 and 1000"),
}


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(name, world, isolated_home, capsys, monkeypatch):
    case = CASES[name]
    if case.card is not None:
        path = isolated_home / "datasets" / case.card_name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(case.card if isinstance(case.card, bytes) else case.card.encode())
    if case.home is not None:
        monkeypatch.setenv("OFFBENCH_HOME", case.home.format(tmp=world))
    before = snapshot(world)
    with pytest.raises(SystemExit) as exit_info:
        cli.main([arg.format(tmp=world) for arg in case.argv])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("offbench: error:"), err
    assert case.fragment in err, err
    assert snapshot(world) == before


def test_a_broken_user_card_is_skipped_with_one_warning(world, isolated_home, capsys):
    """One malformed user card does not stop commands that do not ask for it; it is named once per process."""
    from offbench.data.cards import all_cards, get_card

    (isolated_home / "datasets" / "broken.toml").write_text('id = "x')
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["list"])
    captured = capsys.readouterr()
    assert exit_info.value.code == 0 and "pendulum-scripted" in captured.out
    assert captured.err.strip().splitlines() == [
        f"offbench: warning: skipping a user card: {isolated_home / 'datasets' / 'broken.toml'}: malformed TOML (Unterminated string (at end of document))"
    ]
    all_cards()
    get_card("pendulum-scripted")
    assert capsys.readouterr().err == ""


def test_main_lets_a_real_bug_through_and_maps_typer_abort_and_exit(monkeypatch, capsys):
    """Only OffbenchError, usage errors and user-fixable OS errors on a named file become exit 2; a bug keeps its
    traceback (exit 1)."""

    def raising(error):
        def app(**_):
            raise error

        return app

    for bug in (RuntimeError("a bug"), OSError("an OSError without errno"), FileNotFoundError(2, "No such file", "/x")):
        monkeypatch.setattr(cli, "app", raising(bug))
        with pytest.raises(type(bug)):
            cli.main(["list"])
    monkeypatch.setattr(cli, "app", raising(PermissionError(13, "Permission denied", "/root/x")))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["list"])
    assert exit_info.value.code == 2 and capsys.readouterr().err.strip() == "offbench: error: /root/x: Permission denied"
    for error, code in ((typer.Abort(), 1), (typer.Exit(130), 130)):
        monkeypatch.setattr(cli, "app", raising(error))
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["list"])
        assert exit_info.value.code == code
