"""The validation split of learning-history cards: tasks to choose variants on, apart from the held-out tasks that
boards report. Made by the rule each card's [split] names, reproducible from its seed, and never moving a card's
training or held-out tasks."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from run_dirs import write_benchmark

import offbench
from offbench.data.cards import builtin_cards, card_from_dict, read_card
from offbench.envs.benchmarks import card_split, card_tasks, get_benchmark, split_tasks
from offbench.errors import OffbenchError
from offbench.records import fill_field_tables

REPO = Path(__file__).resolve().parents[1]

# sha256 (first 16 hex) of each card's (held-out, training) task lists as json.dumps(sort_keys=True), computed by
# the code before validation splits existed (commit af3e77a): declaring validation tasks must move neither.
TASKS_BEFORE_VALIDATION = {
    "bandit-dirichlet-adversarial": ("9eedad5199b4b444", "e9e1dc948361d682"),
    "bandit-dirichlet-uniform-200k": ("c0f265269ea6245a", "5c89f52a7286991c"),
    "bandit-dirichlet-uniform": ("c0f265269ea6245a", "880a848585dfc472"),
    "bandit-gaussian-small": ("7034c7e2b9540aaa", "798899d6608957e1"),
    "bandit-gaussian": ("cf2b0188bb7fbb63", "04ae9048143de0ef"),
    "bandit-small": ("e1c5c8da3fb97363", "b95497076280c8a8"),
    "bandit-thompson-adversarial": ("9eedad5199b4b444", "e9e1dc948361d682"),
    "bandit-thompson-uniform": ("c0f265269ea6245a", "880a848585dfc472"),
    "bandit-variable-arms-fixed4-small": ("5bc76b82878c0f01", "294ef3ec476465f7"),  # added after af3e77a: pinned when added
    "bandit-variable-arms-fixed8-small": ("75e47b7110b6ad76", "92ef9ed1ea15502a"),
    "bandit-variable-arms-in-range-small": ("5bc76b82878c0f01", "9e3b8d0f5bd3f5e2"),  # added after af3e77a
    "bandit-variable-arms-small": ("75e47b7110b6ad76", "b771353df5dd8fc6"),
    "bandit-variable-arms": ("15cca30eccc0c191", "b2cfbbe62172b509"),
    "bandit": ("1f1f5fa16d3cf150", "aea6f6cf337a6d4c"),
    "contextual-bandit-headless-linucb": ("97018ca26738f143", "faec210ad1e6804b"),
    "contextual-bandit-linucb-small": ("55e061c332733476", "fc3dd80983d7806b"),
    "contextual-bandit-linucb": ("4715e89aeea1795a", "644334e81535b195"),
    "contextual-bandit-thompson-small": ("55e061c332733476", "fc3dd80983d7806b"),
    "contextual-bandit-thompson": ("4715e89aeea1795a", "644334e81535b195"),
    "darkroom-ad-eps-fast": ("9d1b7c4665db5ad9", "ddbe325e6b337607"),
    "darkroom-ad-eps-plateau": ("9d1b7c4665db5ad9", "ddbe325e6b337607"),
    "darkroom-ad-eps-short": ("9d1b7c4665db5ad9", "ddbe325e6b337607"),
    "darkroom-ad-eps": ("9d1b7c4665db5ad9", "ddbe325e6b337607"),
    "darkroom-hard-ad-eps-fast": ("1729f2b14dc9d74e", "abf62ec36a716973"),
    "darkroom-hard-small": ("d8c171ae4094778f", "541de89ef6b1a6a5"),
    "darkroom-hard": ("1729f2b14dc9d74e", "abf62ec36a716973"),
    "darkroom-permuted-ad-eps-fast": ("85f9de822fecaa0a", "ddbe325e6b337607"),  # darkroom's training tasks
    "darkroom-permuted-small": ("9cb53042262856e3", "08b5263819022d0e"),
    "darkroom-permuted": ("85f9de822fecaa0a", "ddbe325e6b337607"),
    "darkroom-small": ("6cd3b54b0c9962a4", "08b5263819022d0e"),
    "darkroom-uniform-states": ("9d1b7c4665db5ad9", "ddbe325e6b337607"),
    "darkroom": ("9d1b7c4665db5ad9", "ddbe325e6b337607"),
    "keydoor-ad-eps-fast": ("0f71c4aa543135d7", "6125a760063071f1"),
    "keydoor-small": ("1b4a530b4df56efc", "ac37e97f3f700860"),
    "keydoor": ("0f71c4aa543135d7", "6125a760063071f1"),
}
ICRL_CARDS = sorted(path.stem for path in (REPO / "datasets" / "icrl").glob("*.toml"))


def digest(tasks: list[dict]) -> str:
    return hashlib.sha256(json.dumps(tasks, sort_keys=True).encode()).hexdigest()[:16]


def keys(tasks: list[dict]) -> set[str]:
    return {json.dumps(task, sort_keys=True) for task in tasks}


def test_every_in_context_card_declares_a_validation_split():
    assert sorted(TASKS_BEFORE_VALIDATION) == ICRL_CARDS
    for card_id in ICRL_CARDS:
        split = builtin_cards()[card_id].split
        assert split is not None and split.validation is not None and split.validation_from is not None, card_id


@pytest.mark.parametrize("card_id", ICRL_CARDS)
def test_held_out_and_training_tasks_are_those_of_the_code_before_validation(card_id):
    card = builtin_cards()[card_id]
    held_out, held_out_ids = card_split(card, "held-out")
    train, train_ids = card_split(card, "train")
    assert (digest(held_out), digest(train)) == TASKS_BEFORE_VALIDATION[card_id]
    assert (train, held_out) == card_tasks(card)  # the definition the generators and references use
    assert held_out_ids == list(range(len(train), len(train) + len(held_out))) and train_ids == list(range(len(train)))


@pytest.mark.parametrize("card_id", ICRL_CARDS)
def test_validation_tasks_are_disjoint_from_held_out_and_from_training_unless_drawn_from_it(card_id):
    card = builtin_cards()[card_id]
    assert card.split is not None
    train, held_out = card_tasks(card)
    validation, ids = card_split(card, "validation")
    assert len(validation) == len(ids) == len(keys(validation)) == card.split.validation
    assert not keys(validation) & keys(held_out)
    if card.split.validation_from == "train":  # in distribution: training tasks, under their own ids
        assert keys(validation) <= keys(train) and [train[i] for i in ids] == validation
    else:  # unseen: after the held-out ids
        assert not keys(validation) & keys(train)
        first = len(train) + len(held_out)
        assert ids == list(range(first, first + len(validation)))


def test_enumerated_spaces_take_unused_tasks_where_the_data_leaves_some_and_training_tasks_where_it_uses_all():
    for card_id in ICRL_CARDS:
        card = builtin_cards()[card_id]
        assert card.source.recipe is not None and card.split is not None
        params = card.source.recipe.params
        space = get_benchmark(card.source.recipe.generator).task_space_size()
        expected = "fresh" if space is None else "train" if params["tasks"] == space else "unused"
        assert card.split.validation_from == expected, card_id


def with_split_seed(card_id: str, seed: int):
    """The card with another split seed (the recipe's and the [split]'s)."""
    data = builtin_cards()[card_id].to_dict()
    data["source"]["recipe"]["params"]["split_seed"] = seed
    data["split"]["seed"] = seed
    return card_from_dict(data)


@pytest.mark.parametrize("card_id", ["bandit-small", "contextual-bandit-linucb-small", "keydoor-small", "darkroom"])
def test_the_same_seed_gives_the_same_validation_tasks_and_another_seed_others(card_id):
    first, again = card_split(builtin_cards()[card_id], "validation"), card_split(with_split_seed(card_id, 0), "validation")
    assert first == again
    other, _ = card_split(with_split_seed(card_id, 1), "validation")
    assert keys(other) != keys(first[0])


def test_fresh_validation_tasks_come_from_their_own_stream_and_the_held_out_distribution():
    """Adversarial bandits: training tasks favour odd arms, held-out (and validation) tasks even ones; a card of
    several arm counts validates on the held-out count."""
    card = builtin_cards()["bandit-thompson-adversarial"]
    validation = np.array([task["means"] for task in card_split(card, "validation")[0]])
    even_favoured = validation[:, 0::2].mean(axis=1) > validation[:, 1::2].mean(axis=1)
    assert even_favoured.mean() > 0.9
    bench = get_benchmark("bandit")
    # not a continuation of the split's own draws: a split asking for more held-out tasks does not contain them
    _, more_held_out = split_tasks(bench, 2000, 1500, 0, "adversarial")
    assert not keys(card_split(card, "validation")[0]) & keys(more_held_out)
    mixed = card_split(builtin_cards()["bandit-variable-arms-small"], "validation")[0]
    assert {len(task["means"]) for task in mixed} == {8}


def card_data(**split) -> dict:
    data = builtin_cards()["darkroom-small"].to_dict()
    data["split"] = {"seed": 0, **split}
    return data


@pytest.mark.parametrize(
    "split, problem",
    [
        ({}, "card darkroom-small: its [split] declares no validation tasks"),
        ({"validation": 2, "validation_from": "fresh"}, "darkroom enumerates 81 tasks, so there are no fresh ones: use unused or train"),
        ({"validation": 72, "validation_from": "unused"}, "validation = 72 unused tasks asked, but darkroom has 71"),
        ({"validation": 9, "validation_from": "train"}, "validation = 9 training tasks asked, but the split has 8"),
    ],
)
def test_a_validation_split_that_cannot_be_made_is_one_line(split, problem):
    with pytest.raises(OffbenchError, match=problem.replace("[", r"\[").replace("]", r"\]")) as caught:
        card_split(card_from_dict(card_data(**split)), "validation")
    assert "\n" not in str(caught.value)


def test_a_sampled_space_has_no_unused_tasks():
    data = builtin_cards()["bandit-small"].to_dict()
    data["split"].update(validation_from="unused")
    with pytest.raises(OffbenchError, match="bandit's task space is sampled, not enumerated: use fresh"):
        card_split(card_from_dict(data), "validation")


@pytest.mark.parametrize(
    "split, problem",
    [
        ({"validation": 4}, "'split.validation_from' is missing: a validation split needs both validation and validation_from"),
        ({"validation": 0, "validation_from": "train"}, "'split.validation' must be at least 1, got 0"),
        ({"validation": 4, "validation_from": "test"}, "'split.validation_from' must be one of fresh, unused, train, got 'test'"),
    ],
)
def test_a_card_with_a_broken_split_table_is_refused_naming_the_file_and_field(tmp_path, split, problem):
    path = tmp_path / "mine.toml"
    path.write_text(tomli_w.dumps(card_data(**split)))
    with pytest.raises(OffbenchError) as caught:
        read_card(path)
    assert str(caught.value) == f"{path}: {problem}"


def test_the_split_fields_are_documented():
    from offbench.data.cards import CardSplit

    page = (REPO / "docs" / "in-context-rl.md").read_text()
    assert fill_field_tables(page, CardSplit) == page, (
        'regenerate: .venv/bin/python -c "from offbench.records import write_field_tables; '
        "from offbench.data.cards import CardSplit; write_field_tables('docs/in-context-rl.md', CardSplit)\""
    )


class FirstArm:
    """Pulls arm 0 (a Policy: reset / act / observe)."""

    def reset(self, num_envs):
        self.n = num_envs

    def act(self, observations):
        return np.zeros(self.n, dtype=np.int64)

    def observe(self, rewards, dones):
        pass


def test_evaluate_on_validation_tasks_plays_them_and_records_the_split(tmp_path):
    result = offbench.evaluate(FirstArm(), "bandit-small", episodes=5, tasks="validation", out=tmp_path / "run")
    validation, ids = card_split(builtin_cards()["bandit-small"], "validation")
    evaluation = json.loads((tmp_path / "run" / "run.json").read_text())["evaluation"]
    assert evaluation["tasks"] == "validation" and evaluation["task_ids"] == ids
    [line] = [json.loads(line) for line in (tmp_path / "run" / "evaluations.jsonl").read_text().splitlines()]
    assert line["tasks"] == "validation" and len(line["returns"]) == len(validation)
    optimum = np.mean([max(task["means"]) for task in validation])
    assert line["optimal_return"] == pytest.approx(optimum)  # the validation tasks' arms, not the held-out ones'
    assert result.in_context_returns is not None and len(result.in_context_returns) == 5


def test_a_board_refuses_a_run_evaluated_on_validation_tasks(tmp_path, monkeypatch):
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit
    from offbench.tracking.read_run import Refused

    root = tmp_path / "leaderboards"
    monkeypatch.setenv("OFFBENCH_LEADERBOARDS", str(root))
    write_benchmark(root, "tiny-bandit", ["bandit-small"], metric="regret", min_seeds=1, evaluation={"in_context_episodes": 5})
    for tasks in ("validation", "train"):
        run = tmp_path / "runs" / tasks
        offbench.evaluate(FirstArm(), "bandit-small", episodes=5, tasks=tasks, out=run)
        with pytest.raises(Refused) as refused:
            submit(load_spec("tiny-bandit"), [run], render=False)
        assert str(refused.value) == (
            f"{run}: refused (protocol): run.json evaluation.tasks is {tasks!r}; benchmark tiny-bandit reports the held-out tasks"
        )
    held_out = tmp_path / "runs" / "held-out"
    offbench.evaluate(FirstArm(), "bandit-small", episodes=5, out=held_out)
    assert len(submit(load_spec("tiny-bandit"), [held_out], render=False)) == 1


def test_validation_tasks_are_an_in_context_split_only():
    """What a run's eval_tasks reaches: a dataset evaluated otherwise refuses any split but held-out, in one line."""
    from offbench.evaluation.protocols import EvaluationSetup, build_protocol

    card = builtin_cards()["pendulum-scripted"]
    with pytest.raises(OffbenchError) as caught:
        build_protocol(EvaluationSetup(card=card, seed=0, episodes=2, every_steps=1, tasks="validation"))
    assert str(caught.value) == (
        "pendulum-scripted: the validation tasks are an in-context split (eval_tasks); this dataset is evaluated single-task"
    )
