"""The data's own row on a board (`[behaviour]`, the behaviour policy's score): shown marked beside the methods and
never ranked or aggregated, refused in one line where it cannot apply, computed from the data, and compared with
the data by `leaderboard check` where the dataset is on disk."""

from __future__ import annotations

import json

import numpy as np
import pytest
from run_dirs import make_bench, runs_of, write_benchmark

from offbench.errors import OffbenchError

DATA_ROW = "behaviour policy (the data)"
TASKS = ["reach-v3", "push-v3"]
# (task id, success at each step) per episode: task 0 succeeds in 2 of 3 episodes (once at a middle step only),
# task 1 in 1 of 2. By hand: the mean over tasks of the per-task success rate is (2/3 + 1/2) / 2 = 7/12.
EPISODES = [
    (0, [False, False, True]),
    (0, [False, True, False, False]),
    (0, [False, False]),
    (1, [False, False, False, True]),
    (1, [False, False]),
]
HAND_COUNTED = (2 / 3 + 1 / 2) / 2


def register_multitask(dataset_id: str = "test/mt", with_success: bool = True, with_data: bool = True) -> str:
    """A multi-task user card over TASKS and, unless `with_data` is off, its native file holding EPISODES;
    returns the data's content checksum (None without data)."""
    from offbench.data.cards import card_from_dict, write_card
    from offbench.data.resolve import native_path
    from offbench.data.store import EpisodeStore
    from offbench.paths import user_cards_dir

    card = card_from_dict(
        {
            "id": dataset_id,
            "description": "tiny multi-task test dataset",
            "format": "offbench",
            "kind": "multi-task",
            "source": {"recipe": {"generator": "test", "seed": 0}},
            "env": {"id": "MT2", "suite": "metaworld", "kwargs": {"tasks": TASKS}},
        }
    )
    write_card(card, user_cards_dir() / f"{dataset_id.replace('/', '-')}.toml")
    rng = np.random.default_rng(0)
    episodes = []
    for task, success in EPISODES:
        length = len(success)
        episode = {
            "observations": rng.normal(size=(length + 1, 3)).astype(np.float32),
            "actions": rng.normal(size=(length, 2)).astype(np.float32),
            "rewards": np.ones(length, np.float32),
            "terminations": np.zeros(length, bool),
            "truncations": np.arange(length) == length - 1,
            "task_id": np.full(length, task, np.int64),
        }
        if with_success:
            episode["infos/success"] = np.array(success)
        episodes.append(episode)
    store = EpisodeStore.from_episodes(episodes)
    if not with_data:
        return ""
    store.save(native_path(card))
    return store.content_sha256()


def mt_board(root, behaviour: dict[str, float], **overrides) -> None:
    write_benchmark(root, "mt", ["test/mt"], metric="success_rate", behaviour=behaviour, **overrides)


# ------------------------------------------------------------------------------ the row on the board's pages


def test_the_data_row_is_shown_marked_and_never_ranked_or_aggregated(tmp_path, monkeypatch):
    from offbench.leaderboard.index import board_table
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    bench = make_bench(tmp_path, monkeypatch, {"bc": 40.0, "iql": 70.0})
    reported = {"label": "CQL", "source": {"paper": "P", "table": "T", "version": "v1"}, "scores": {"test/b": {"mean": 5.0}}}
    write_benchmark(bench["root"], "tb", ["test/a", "test/b"], behaviour={"test/a": 99.5}, reported=[reported])
    for baseline in ("bc", "iql"):
        submit(load_spec("tb"), runs_of(bench, baseline), render=baseline == "iql")

    results = json.loads((bench["folder"] / "results.json").read_text())
    assert results["behaviour"] == {"label": DATA_ROW, "scores": {"test/a": 99.5}}
    for part, column in (("cells", "label"), ("aggregates", "label"), ("probability_of_improvement", "x")):
        assert {row[column] for row in results[part]} == {"bc", "iql"}, part  # above both methods, yet in no statistic

    readme = (bench["folder"] / "README.md").read_text()
    rows = [line for line in readme.split("## Results")[1].split("###")[0].splitlines() if line.startswith("| ")]
    labels = [row.split(" | ")[0].removeprefix("| ") for row in rows[1:]]
    assert labels == ["iql", "bc", f"*{DATA_ROW}*", "*CQL* (reported \\[1\\])"]  # ours ranked, then the data, then published
    assert rows[3] == f"| *{DATA_ROW}* | *—* | *—* | *99.5* | *—* | *—* | *—* | *—* |"  # a dash for test/b and every aggregate
    assert "The row 'behaviour policy (the data)' is each dataset's own episodes" in readme

    page = (bench["folder"] / "index.html").read_text()
    assert f'<tr class="data"><td>{DATA_ROW}</td><td>—</td><td>—</td><td>99.5</td>' in page
    assert '<tr class="reported"><td>CQL <span class="tag">reported [1]</span></td>' in page

    block = board_table(load_spec("tb"))
    assert f"| *{DATA_ROW}* |" in block and "each dataset's own episodes" in block
    only_b = board_table(load_spec("tb"), ["test/b"])  # the data has no cell there: neither the row nor its note
    assert DATA_ROW not in only_b and "(reported \\[1\\])" in only_b


def test_without_a_behaviour_table_no_row_or_note_appears(tmp_path, monkeypatch):
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    bench = make_bench(tmp_path, monkeypatch, {"bc": 40.0}, datasets=("test/a",))
    submit(load_spec("tb"), runs_of(bench, "bc"))
    assert DATA_ROW not in (bench["folder"] / "README.md").read_text() + (bench["folder"] / "index.html").read_text()
    assert json.loads((bench["folder"] / "results.json").read_text())["behaviour"]["scores"] == {}


@pytest.mark.parametrize(
    "overrides, problem",
    [
        ({"behaviour": {"test/zzz": 0.5}}, r"'behaviour' names 'test/zzz', which is not in 'datasets'"),
        ({"behaviour": {"test/mt": 0.5}, "metric": "regret"}, r"'behaviour' needs metric success_rate or normalized_score"),
        ({"behaviour": {"test/mt": 1.5}}, r"'behaviour\.test/mt' must be a success rate between 0 and 1, got 1\.5"),
        ({"behaviour": {"test/mt": "high"}}, r"'behaviour\.test/mt' must be a finite number, got 'high'"),
    ],
)
def test_a_bad_behaviour_table_is_one_line_naming_the_file_and_key(root, overrides, problem):
    from offbench.leaderboard.spec import load_spec

    metric = overrides.pop("metric", "success_rate")
    in_context = {"evaluation": {"episodes": 5, "in_context_episodes": 4}} if metric == "regret" else {}
    write_benchmark(root, "mt", ["test/mt"], metric=metric, **in_context, **overrides)
    with pytest.raises(OffbenchError, match=problem) as caught:
        load_spec("mt")
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and message.startswith(str(root / "mt" / "benchmark.toml"))


# ------------------------------------------------------------------------------ the score, from the data


def test_the_success_rate_is_the_mean_over_tasks_of_a_hand_count():
    from offbench.data.resolve import open_dataset
    from offbench.leaderboard.behaviour import behaviour_score

    register_multitask()
    assert behaviour_score(open_dataset("test/mt"), "success_rate") == pytest.approx(HAND_COUNTED, abs=1e-6)


def test_the_normalised_score_is_the_mean_episode_return_on_the_cards_references():
    from run_dirs import register_dataset

    from offbench.data.resolve import open_dataset
    from offbench.leaderboard.behaviour import behaviour_score

    register_dataset("test/a")  # reference scores: ref_min -1000, ref_max 0
    dataset = open_dataset("test/a")
    store = dataset.store
    returns = [float(np.sum(store.rewards[a:b])) for a, b in zip(store.episode_starts[:-1], store.episode_starts[1:])]
    assert behaviour_score(dataset, "normalized_score") == pytest.approx(100 * (np.mean(returns) + 1000) / 1000)


def test_data_that_cannot_have_the_score_is_a_one_line_error():
    from offbench.data.resolve import open_dataset
    from offbench.leaderboard.behaviour import behaviour_score

    register_multitask("test/no-success", with_success=False)
    with pytest.raises(OffbenchError, match=r"test/no-success\): no infos/success column") as caught:
        behaviour_score(open_dataset("test/no-success"), "success_rate")
    assert len(str(caught.value).splitlines()) == 1
    register_multitask()  # its card has no [scores]
    with pytest.raises(OffbenchError, match=r"test/mt\): its card has no reference scores") as caught:
        behaviour_score(open_dataset("test/mt"), "normalized_score")
    assert len(str(caught.value).splitlines()) == 1


# ------------------------------------------------------------------------------ leaderboard behaviour / check


def test_the_behaviour_command_prints_the_table_to_paste(root, run_cli):
    register_multitask()
    mt_board(root, {})
    shown = run_cli("leaderboard", "behaviour", "mt", check=True)
    assert shown.stdout == '[behaviour]\n"test/mt" = 0.583\n'
    mt_board(root, {"test/mt": 0.583})  # pasted: check agrees
    assert run_cli("leaderboard", "check", "mt").returncode == 0


def test_check_flags_a_wrong_value_and_passes_a_right_one(root, run_cli):
    register_multitask()
    mt_board(root, {"test/mt": round(HAND_COUNTED, 3)})
    right = run_cli("leaderboard", "check", "mt")
    assert right.returncode == 0 and "[behaviour] 'test/mt' = 0.583 agrees with the data (0.5833)" in right.stdout
    mt_board(root, {"test/mt": 0.6})
    wrong = run_cli("leaderboard", "check", "mt")
    assert wrong.returncode != 0
    assert f"{root / 'mt' / 'benchmark.toml'}: [behaviour] 'test/mt' = 0.6, but the data gives 0.5833" in wrong.stderr


def test_check_skips_data_that_is_not_on_this_machine_or_not_the_pinned_content(root, run_cli):
    from offbench.data.resolve import native_path

    register_multitask(with_data=False)
    mt_board(root, {"test/mt": 0.9})
    missing = run_cli("leaderboard", "check", "mt")
    assert missing.returncode == 0 and "'test/mt' not compared: not on this machine" in missing.stdout
    from offbench.data.cards import get_card

    assert not native_path(get_card("test/mt")).exists()  # nothing was generated
    register_multitask()
    mt_board(root, {"test/mt": 0.9}, dataset_checksums={"test/mt": "0" * 64})
    other = run_cli("leaderboard", "check", "mt")
    assert other.returncode == 0 and "'test/mt' not compared: the copy at" in other.stdout and "is not the pinned content" in other.stdout


def test_a_board_without_behaviour_values_is_checked_whatever_its_metric():
    """`leaderboard check` on a regret or in-context board once raised a KeyError (no tolerance for its metric)."""
    from types import SimpleNamespace

    from offbench.leaderboard.behaviour import check_lines

    for metric in ("regret", "in_context_return"):
        spec = SimpleNamespace(name="b", metric=SimpleNamespace(name=metric), behaviour={})
        assert check_lines(spec, []) == ([], [])  # pyright: ignore[reportArgumentType]
