"""AD and DPT on a synthetic file in the published XLand-100B layout: (tile, colour) codes embedded as categories,
`offbench run baseline ad|dpt` evaluating in context on held-out rulesets of xminigrid (JAX, CPU), resume, figures,
and the one-line error of a machine without the xland extra. Nothing reaches the network."""

from __future__ import annotations

import json
import sys

import h5py
import numpy as np
import pytest
import torch
from helpers import assert_resume_repeats_the_run, read_jsonl, registered_xland_card, tiny_rulesets
from tiny_runs import run_args

from offbench.baselines import get_baseline

HELD_OUT = 2  # rulesets 2 and 3 of the four tiny ones; the file's two tasks use 0 and 1
SMALL = dict(steps=4, log_every=2, eval_every=2, checkpoint_every=2, eval_episodes=2)


def test_tile_and_colour_codes_are_embedded_as_categories(tmp_path):
    import offbench
    from offbench.baselines.incontext import GridCodeEmbedding, observation_features
    from offbench.data.spec import DatasetSpec
    from offbench.data.xland import write_xland_file

    spec = DatasetSpec.from_store(offbench.load(write_xland_file(tmp_path / "x.hdf5", 1, 1, 20, chunk_steps=16)))
    codes, normalize, width = observation_features(spec)
    assert isinstance(codes, GridCodeEmbedding) and normalize is None and width == 25 * 2 * 16
    observations = torch.zeros(3, 5, 5, 2)
    observations[0, 2, 1] = torch.tensor([7.0, 4.0])  # tile 7, colour 4 in cell (2, 1)
    features = codes(observations).reshape(3, 5, 5, 32)
    assert torch.equal(features[0, 2, 1], torch.cat([codes.tables[0].weight[7], codes.tables[1].weight[4]]))
    assert torch.equal(features[1, 2, 1], torch.cat([codes.tables[0].weight[0], codes.tables[1].weight[0]]))


@pytest.mark.parametrize(
    "name,config",
    [
        (
            "ad",
            {
                "token_layout": "step",
                "context_steps": 12,
                "embedding_dim": 8,
                "hidden_dim": 16,
                "num_layers": 1,
                "num_heads": 2,
                "attention_dropout": 0.0,
                "residual_dropout": 0.0,
                "embedding_dropout": 0.0,
            },
        ),
        ("dpt", {"context_size": 12, "embedding_dim": 16, "num_layers": 1}),
    ],
)
def test_updates_on_xland_batches_fit_them(tmp_path, name, config):
    """Repeated updates on one batch of an XLand sampler drive its loss down (DPT's labels: the file's expert_actions)."""
    import offbench
    from offbench.data.samplers import make_sampler
    from offbench.data.spec import DatasetSpec
    from offbench.data.xland import write_xland_file

    store = offbench.load(write_xland_file(tmp_path / "x.hdf5", 2, 2, 200, chunk_steps=64))
    cls = get_baseline(name)
    torch.manual_seed(0)
    baseline = cls(cls.Config(**config, learning_rate=3e-3), DatasetSpec.from_store(store))
    batch = make_sampler(cls.sampler, store, batch_size=8, seed=0, **baseline.sampler_options()).sample()
    losses = [baseline.update(batch)["action_loss"] for _ in range(40)]
    assert losses[-1] < 0.7 * losses[0]


def test_a_machine_without_the_xland_extra_is_told_before_any_download(tmp_path, isolated_home, cli, monkeypatch):
    placeholders = {
        "goals": np.zeros((4, 5), np.uint8),
        "rules": np.zeros((4, 1, 7), np.uint8),
        "init_tiles": np.zeros((4, 1, 2), np.uint8),
        "num_rules": np.zeros(4, np.int64),
    }
    registered_xland_card(isolated_home, tmp_path, HELD_OUT, placeholders, in_place=False)  # a download would fail
    monkeypatch.setitem(sys.modules, "xminigrid", None)  # import xminigrid raises ImportError, as when not installed
    code, _, err = cli("run", "baseline", "ad", "--dataset", "test/xland", "--out", tmp_path / "runs")
    assert code == 2 and err.strip() == "offbench: error: 'xminigrid' is not installed; install it with: pip install 'offbench[xland]'"
    assert not (tmp_path / "runs").exists() and not (isolated_home / "data" / "test" / "xland").exists()


def test_plot_of_an_xland_file_draws_its_learning_histories(tmp_path, isolated_home, cli):
    import offbench
    from offbench.data.xland import write_xland_file
    from offbench.plotting.histories import learning_curve

    path = write_xland_file(tmp_path / "x.hdf5", 2, 2, 300, chunk_steps=128)
    store = offbench.load(path)
    episode, mean, _, histories = learning_curve(store)
    index, returns = store.history_episode_returns(np.arange(2))
    with h5py.File(path, "r") as f:  # episode 0 of task 1, history 0: up to and including its first done
        rewards, dones = f["1/rewards"][0].astype(np.float64), f["1/dones"][0]
    first_end = int(np.flatnonzero(dones)[0])
    assert histories == 4 and np.isclose(returns[index == 0][2], rewards[: first_end + 1].sum())
    assert np.isclose(mean[0], returns[index == 0].mean()) and len(episode) == index.max() + 1
    code, out, err = cli("plot", path, "-o", tmp_path / "histories.png")
    assert code == 0, err
    assert (tmp_path / "histories.png").stat().st_size > 0


@pytest.mark.slow  # ~45 s for both on a busy 2-core machine, most of it importing JAX and compiling xminigrid (once)
@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_run_evaluates_in_context_on_held_out_rulesets_and_resumes_to_the_same_numbers(tmp_path, isolated_home, cli, monkeypatch, name):
    registered_xland_card(isolated_home, tmp_path, HELD_OUT, tiny_rulesets(), tasks=2, max_steps=6)
    code, _, err = cli(*run_args(name, "test/xland", tiny=True, out=tmp_path, **SMALL), "--name", "whole")
    assert code == 0, err
    run = json.loads((tmp_path / "whole" / "run.json").read_text())
    assert run["evaluation"]["protocol"] == "in-context" and run["evaluation"]["task_ids"] == [2, 3]
    evaluations = read_jsonl(tmp_path / "whole" / "evaluations.jsonl")
    assert [e["step"] for e in evaluations] == [2, 4]
    for line in evaluations:
        assert line["tasks"] == "held-out" and len(line["in_context_returns"]) == 2
        assert len(line["task_returns"]) == HELD_OUT and all(len(r) == 2 for r in line["task_returns"])
        assert line["regret"] is None and line["in_context_regret"] is None and line["optimal_return"] is None  # optimum unknown
        assert all(0 <= r <= 1 for task in line["task_returns"] for r in task) and all(n <= 6 for n in line["lengths"])
    assert json.loads((tmp_path / "whole" / "summary.json").read_text())["score_metric"] == "mean_return"

    assert_resume_repeats_the_run(
        cli, monkeypatch, name, run_args(name, "test/xland", tiny=True, out=tmp_path, **SMALL), tmp_path, stop_at=3
    )

    code, out, err = cli("evaluate", tmp_path / "whole", "--tasks", "train")
    assert code == 0 and "in context (train tasks)" in out and "optimal return unknown" in " ".join(out.split()), err
    code, out, err = cli("plot", tmp_path / "whole", "-o", tmp_path / "in-context.png")  # returns per episode: no regret
    assert code == 0 and "in-context.png" in out, err
    code, _, err = cli("plot", tmp_path / "whole", "--kind", "regret", "-o", tmp_path / "regret.png")
    assert code == 2 and "XLand rulesets lack" in err and not (tmp_path / "regret.png").exists()
