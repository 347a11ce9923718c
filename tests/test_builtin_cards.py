"""Every built-in card in datasets/ parses, has a unique id, names a format and environment that exist, and is
written back as it reads."""

import tomllib

import gymnasium as gym
import pytest
from helpers import require_extra

from offbench.data.cards import all_cards, read_card, write_card
from offbench.data.formats import FORMATS
from offbench.paths import builtin_dir

CARD_FILES = sorted(builtin_dir("datasets").rglob("*.toml"))


def test_cards_parse_with_unique_ids():
    ids = [read_card(path).id for path in CARD_FILES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert set(all_cards()) == set(ids)


@pytest.mark.parametrize("path", CARD_FILES, ids=lambda p: p.stem)
def test_card_names_known_format_and_env(path):
    card = read_card(path)
    assert card.format in FORMATS
    if card.env.get("suite") == "gymnasium":
        gym.spec(card.env["id"])  # raises if gymnasium does not know the id


def test_d4rl_locomotion_cards_have_urls_and_reference_scores():
    cards = {c.id: c for c in all_cards().values() if c.id.startswith("d4rl/")}
    expected_scores = {"halfcheetah": (-280.178953, 12135.0), "hopper": (-20.272305, 3234.3), "walker2d": (1.629008, 4592.3)}
    for env, (ref_min, ref_max) in expected_scores.items():
        for quality in ("random", "medium", "medium-replay", "medium-expert", "expert"):
            card = cards[f"d4rl/{env}-{quality}-v2"]
            url = card.source["files"][0]["url"]
            assert url == f"http://rail.eecs.berkeley.edu/datasets/offline_rl/gym_mujoco_v2/{env}_{quality.replace('-', '_')}-v2.hdf5"
            assert (card.ref_min_score, card.ref_max_score) == (ref_min, ref_max)
            assert card.format == "d4rl" and card.license == "CC BY 4.0"
            assert card.normalise(ref_max) == pytest.approx(100.0)
    assert len(cards) == 15


def test_minari_mujoco_cards_point_at_minari_ids():
    cards = [c for c in all_cards().values() if c.format == "minari"]
    assert {c.source["minari_id"] for c in cards} >= {
        "mujoco/hopper/medium-v0",
        "mujoco/halfcheetah/expert-v0",
        "mujoco/walker2d/simple-v0",
    }
    for card in cards:
        assert card.id == f"minari/{card.source['minari_id']}"
        assert card.env["id"].endswith("-v5")


# What D4RL's v2 data was collected on: gym's MuJoCo v3 environments (mujoco-py). Checked in openai/gym:
# gym/envs/mujoco/assets/walker2d.xml (foot_geom friction 0.9, foot_left_geom 1.9),
# gym/envs/mujoco/assets/hopper.xml (foot_geom 2.0), and walker2d_v3.py / hopper_v3.py, whose
# `healthy_reward` is `float(is_healthy or terminate_when_unhealthy) * healthy_reward`: the step that
# ends an episode by falling still pays the healthy reward. Gymnasium 1.x's -v5 changes both for
# Walker2d (both feet 1.9) and the reward rule for Hopper (walker2d_v5.py / hopper_v5.py version history).
GYM_V3_FOOT_FRICTION = {"Walker2d": {"foot_geom": 0.9, "foot_left_geom": 1.9}, "Hopper": {"foot_geom": 2.0}}
GYM_V3_HEALTHY_REWARD_ON_FALLING = 1.0

D4RL_LEGGED_CARDS = sorted(
    (card for card in all_cards().values() if card.id.startswith(("d4rl/walker2d", "d4rl/hopper"))), key=lambda c: c.id
)


@pytest.mark.parametrize("card", D4RL_LEGGED_CARDS, ids=lambda c: c.id)
def test_d4rl_card_environment_matches_the_model_the_data_was_collected_on(card):
    require_extra("mujoco", "mujoco")
    import numpy as np

    from offbench.envs.factory import make_env

    env = make_env(card.env)
    robot = card.env["id"].split("-")[0]
    model = env.unwrapped.model
    for geom, friction in GYM_V3_FOOT_FRICTION[robot].items():
        assert model.geom(geom).friction[0] == pytest.approx(friction), (card.id, geom)

    env.reset(seed=0)
    qpos, qvel = env.unwrapped.data.qpos.copy(), env.unwrapped.data.qvel.copy()
    qpos[2] = 1.5  # torso tilted past the healthy angle range (-1, 1): this step ends the episode
    env.unwrapped.set_state(qpos, qvel)
    _, reward, terminated, _, info = env.step(np.zeros(env.action_space.shape))
    assert terminated
    assert reward - info["x_velocity"] == pytest.approx(GYM_V3_HEALTHY_REWARD_ON_FALLING), card.id


@pytest.mark.parametrize("path", CARD_FILES, ids=lambda p: p.stem)
def test_card_is_written_back_as_it_reads(path, tmp_path):
    card = read_card(path)
    assert read_card(write_card(card, tmp_path / path.name)).to_dict() == card.to_dict() == tomllib.loads(path.read_text())
