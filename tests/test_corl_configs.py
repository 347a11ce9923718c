"""Every shipped CQL/IQL config file names its source and passes the trainer's config resolution; the D4RL
configs of DT, CQL and IQL evaluate as CORL's do."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from offbench.baselines.cql import CQL, CQLConfig
from offbench.baselines.dt import DecisionTransformer as DT
from offbench.baselines.iql import IQL, IQLConfig
from offbench.data.cards import all_cards
from offbench.training.config import resolve_config, standard_config_path

ROOT = Path(__file__).resolve().parents[1] / "baselines"
FILES = [(path, CQL) for path in sorted((ROOT / "cql").glob("*.toml"))] + [(path, IQL) for path in sorted((ROOT / "iql").glob("*.toml"))]


@pytest.mark.parametrize("path, baseline", FILES, ids=[f"{p.parent.name}/{p.name}" for p, _ in FILES])
def test_config_file_resolves_with_a_source(path, baseline):
    assert "CORL" in tomllib.loads(path.read_text())["source"]  # every file derives from CORL's configs
    resolved = resolve_config(baseline, None, config_file=path)  # unknown keys and wrong types raise
    if baseline is IQL:  # its actor's learning-rate schedule spans the run
        assert resolved.baseline.steps == resolved.train.steps


def test_default_files_hold_the_dataclass_defaults():
    for baseline, config_class in ((CQL, CQLConfig), (IQL, IQLConfig)):
        assert resolve_config(baseline, None).baseline == config_class()


def test_d4rl_dataset_ids_find_their_corl_config():
    assert standard_config_path("iql", "d4rl/hopper-medium-expert-v2").name == "d4rl-hopper-medium-expert-v2.toml"
    resolved = resolve_config(IQL, "d4rl/hopper-medium-expert-v2")
    assert (resolved.baseline.beta, resolved.baseline.expectile) == (6.0, 0.5)  # CORL's values for that dataset
    assert resolve_config(CQL, "d4rl/hopper-medium-v2").baseline.normalize_reward


# CORL's D4RL configs (github.com/tinkoff-ai/CORL configs/offline/{dt,cql,iql}/<env>/*_v2.yaml): every
# baseline evaluates every 5,000 updates; DT on 100 episodes (eval_episodes), CQL and IQL on 10 (n_episodes).
CORL_EVAL_EPISODES = {DT: 100, CQL: 10, IQL: 10}
D4RL_CONFIGS = [(path, baseline) for baseline in CORL_EVAL_EPISODES for path in sorted((ROOT / baseline.name).glob("d4rl-*.toml"))]


@pytest.mark.parametrize("path, baseline", D4RL_CONFIGS, ids=[f"{p.parent.name}/{p.name}" for p, _ in D4RL_CONFIGS])
def test_d4rl_configs_evaluate_on_corls_schedule(path, baseline):
    train = resolve_config(baseline, None, config_file=path).train
    assert (train.eval_every, train.eval_episodes) == (5_000, CORL_EVAL_EPISODES[baseline])


@pytest.mark.parametrize("baseline", [CQL, IQL, DT], ids=lambda b: b.name)
@pytest.mark.parametrize("level", ["medium", "medium-replay", "medium-expert"])
def test_mujoco_local_hopper_takes_corls_config_of_its_d4rl_analogue(baseline, level):
    """mujoco-local/hopper-<level> is D4RL's recipe made here: its card names hopper-<level>-v2 as its analogue, whose
    file the trainer takes, so a row on the mujoco-local board differs from CORL's only in data and budget."""
    theirs = standard_config_path(baseline.name, f"d4rl/hopper-{level}-v2")
    assert theirs is not None and theirs.name.startswith("d4rl-hopper")
    assert standard_config_path(baseline.name, f"mujoco-local/hopper-{level}") == theirs
    budget = resolve_config(baseline, f"mujoco-local/hopper-{level}", overrides=["steps=10000"])
    assert budget.sources[0] == str(theirs)
    if baseline is IQL:  # a CPU budget shortens the actor's learning-rate schedule with the run
        assert budget.baseline.steps == budget.train.steps == 10_000


def test_every_analogue_is_a_registered_card_of_the_same_kind():
    cards = all_cards()
    named = {card.id: card.analogue for card in cards.values() if card.analogue}
    assert {
        f"mujoco-local/{env}-{level}"
        for env in ("hopper", "halfcheetah", "walker2d")
        for level in ("medium", "medium-replay", "medium-expert", "expert")
    } <= set(named)
    for card_id, analogue in named.items():
        assert analogue in cards and cards[analogue].kind == cards[card_id].kind, card_id


def test_an_analogue_with_no_file_of_its_own_falls_through_to_the_default():
    assert standard_config_path("cql", "mujoco-local/hopper-expert").name == "default.toml"  # CORL has no expert config
    assert standard_config_path("dt", "mujoco-local/hopper-expert").name == "d4rl-hopper.toml"  # DT's is per environment
    assert standard_config_path("cql", "runs/some-file.h5").name == "default.toml"  # a path has no card
