"""A run made before its dataset was renamed records the old id: `offbench evaluate` re-opens it through the renamed
card (`formerly`) and the data already under the old id's folder, as leaderboard verification does."""

from __future__ import annotations

import json

import pytest
from tiny_runs import run_args

from offbench.data.cards import get_card
from offbench.generators import generate_from_card
from offbench.paths import data_dir

RENAMES = [  # (former id, id, tasks in the tiny recipe)
    pytest.param("minigrid/tiny-sub-optimal", "minigrid/tiny-noisy-planner", 3, id="minigrid"),
    pytest.param("metaworld/tiny-sub-optimal", "metaworld/tiny-noisy-expert", 2, id="metaworld"),
]


@pytest.mark.parametrize("old, new, tasks", RENAMES)
def test_a_run_recording_a_former_dataset_id_is_re_evaluated_on_the_data_under_that_id(cli, tmp_path, old, new, tasks):
    made_before = generate_from_card(get_card(new), data_dir(old) / "data.h5", quiet=True)  # the data as the old card made it
    code, _, err = cli(*run_args("bc", old, tiny=True, eval_episodes=1, out=tmp_path, name="run"))
    assert code == 0, err
    run_json = tmp_path / "run" / "run.json"
    run = json.loads(run_json.read_text())
    assert run["dataset"]["id"] == new and run["dataset"]["path"] == str(made_before.resolve())
    run["dataset"]["id"] = old  # as a run made before the rename recorded it
    run_json.write_text(json.dumps(run))

    code, out, err = cli("evaluate", tmp_path / "run", "--episodes", "1")
    assert code == 0, err
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["all"])  # episodes, return, std, score, success
    final = json.loads((tmp_path / "run" / "summary.json").read_text())["final"]
    assert "step 50" in out and row[1] == str(tasks) and float(row[5]) == final["success_rate"]  # the run's own seeds, replayed
    assert not data_dir(new).exists()  # nothing was made again under the new id
