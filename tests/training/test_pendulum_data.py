"""The pendulum-scripted dataset: reproducible, a real spread of returns, time limits stored as truncations,
and reference scores in its card that the committed script reproduces."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import numpy as np

from offbench.data.cards import get_card
from offbench.data.store import load_native
from offbench.generators import get_generator
from offbench.paths import builtin_dir

REPO = builtin_dir("datasets").parent


def test_generation_is_reproducible_and_seed_dependent(tmp_path):
    generate = get_generator("pendulum-scripted")
    params = {"noise_levels": [0.0, 2.0], "episodes_per_level": 2}
    first = load_native(generate(params, 3, tmp_path / "a.h5", True))
    again = load_native(generate(params, 3, tmp_path / "b.h5", True))
    other = load_native(generate(params, 4, tmp_path / "c.h5", True))
    assert first.content_sha256() == again.content_sha256()
    assert first.content_sha256() != other.content_sha256()


def test_dataset_shape_and_semantics(pendulum):
    store = pendulum
    assert store.num_episodes == 100 and store.num_transitions == 20_000
    assert np.all(store.episode_lengths == 200)
    # Pendulum-v1 never terminates; its 200-step time limit is a truncation (bootstrap through it)
    assert not store.terminations.any() and store.truncations.sum() == 100 and store.truncations[store.is_last_step].all()
    assert np.abs(store.actions).max() <= 2.0
    returns = store.episode_returns().reshape(4, 25).mean(axis=1)  # one block of episodes per noise level
    assert returns[0] > -200 and returns[-1] < -600 and np.all(np.diff(returns[1:]) < 0)
    # the next observation at an episode end is the stored final observation, not the next episode's first
    last = store.episode_starts[1] - 1
    assert np.array_equal(store.next_observations(np.array([last]))[0], store.final_observations[0])


def test_card_reference_scores_are_what_the_script_measures():
    card = get_card("pendulum-scripted")
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "pendulum_reference_scores.py"), "--episodes", "100"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    measured = tomllib.loads(out)["scores"]
    assert measured["ref_min"] == card.ref_min_score and measured["ref_max"] == card.ref_max_score
    assert measured["measured"] == card.scores["measured"]
    assert card.normalise(card.ref_max_score) == 100.0 and card.normalise(card.ref_min_score) == 0.0
