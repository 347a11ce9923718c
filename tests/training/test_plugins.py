"""Baselines from other packages (entry points of the group "offbench.baselines", docs/plugins.md): the example
package examples/plugin, installed offline into a temporary site directory, trains, resumes, sweeps and
re-evaluates like a built-in; a clashing or broken plugin is a one-line error naming its distribution that stops
nothing else; and `offbench.testing.check_baseline` passes it and names the rule a broken class breaks.

`plugin_site` and the `install` fixture are what other tests reuse to run offbench with a plugin installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import interrupt_then_resume, logged_metrics, make_store
from tiny_runs import run_args

from offbench.data.store import EpisodeStore

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_SOURCE = REPO / "examples" / "plugin" / "src" / "offbench_example_plugin"
EXAMPLE_ORIGIN = {
    "kind": "plugin",
    "name": "linear-bc",
    "distribution": "offbench-example-plugin",
    "version": "0.1.0",
    "entry_point": "offbench_example_plugin.linear_bc:LinearBC",
}
TINY_RUN = [
    "--set",
    "steps=60",
    "--set",
    "batch_size=32",
    "--set",
    "hidden_dim=8",
    "--set",
    "log_every=10",
    "--set",
    "eval_every=30",
    "--set",
    "eval_episodes=2",
    "--set",
    "checkpoint_every=20",
]


def plugin_site(
    site: Path,
    entry_points: dict[str, str],
    distribution: str = "offbench-example-plugin",
    version: str = "0.1.0",
    example: bool = True,
    example_configs: bool = True,
) -> Path:
    """What `pip install` of a plugin package leaves in site directory `site`, without pip or a network: a
    `<distribution>-<version>.dist-info` whose entry_points.txt declares `entry_points` (baseline name ->
    "module:Class") in the offbench.baselines group, and (`example`) a copy of the example package, with its
    standard configs unless `example_configs` is false. Other modules a test writes into `site` itself."""
    info = site / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(
        "[offbench.baselines]\n" + "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    )
    if example:
        skipped = ("__pycache__",) if example_configs else ("__pycache__", "configs")
        shutil.copytree(EXAMPLE_SOURCE, site / EXAMPLE_SOURCE.name, ignore=shutil.ignore_patterns(*skipped))
    return site


@pytest.fixture
def install(monkeypatch):
    """`install(site)`: the distributions in site directory `site` are installed until the test ends, for this
    process (sys.path) and for the offbench commands it starts (PYTHONPATH)."""
    from offbench.baselines import plugin_entry_points

    sites: list[Path] = []

    def add(site: Path) -> None:
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
        plugin_entry_points.cache_clear()
        sites.append(site)

    yield add
    for name, module in list(sys.modules.items()):  # the next test installs its own copies
        if any(Path(getattr(module, "__file__", None) or "/").is_relative_to(site) for site in sites):
            del sys.modules[name]
    plugin_entry_points.cache_clear()


@pytest.fixture
def example(tmp_path, install) -> Path:
    """The example package installed; returns its site directory."""
    site = plugin_site(tmp_path / "site", {"linear-bc": EXAMPLE_ORIGIN["entry_point"]})
    install(site)
    return site


def one_line(err: str) -> str:
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


# ---------------------------------------------------------------------------------------------- a working plugin


def test_plugin_trains_records_its_origin_resumes_and_reevaluates(example, pendulum, cli, tmp_path, monkeypatch):
    from offbench.baselines import baseline_names, baseline_origin, get_baseline

    assert "linear-bc" in baseline_names() and baseline_origin("linear-bc") == EXAMPLE_ORIGIN
    assert baseline_origin("bc") == {"kind": "built-in", "name": "bc"}
    args = run_args("linear-bc", "pendulum-scripted", *TINY_RUN, out=tmp_path)
    code, out, err = cli(*args, "--name", "whole")
    assert code == 0, err
    run = json.loads((tmp_path / "whole" / "run.json").read_text())
    assert run["baseline"] == "linear-bc" and run["method"] == EXAMPLE_ORIGIN
    assert run["config_sources"][0] == str(example / "offbench_example_plugin" / "configs" / "linear-bc" / "pendulum-scripted.toml")
    assert [m["step"] for m in logged_metrics(tmp_path / "whole")] == [10, 20, 30, 40, 50, 60]

    cut = interrupt_then_resume(cli, monkeypatch, get_baseline("linear-bc"), args, tmp_path, stop_at=45)
    assert logged_metrics(cut) == logged_metrics(tmp_path / "whole")
    assert (cut / "evaluations.jsonl").read_text() == (tmp_path / "whole" / "evaluations.jsonl").read_text()

    code, out, err = cli("evaluate", tmp_path / "whole", "--episodes", "2")
    assert code == 0, err
    assert "step 60" in out


def test_plugin_without_standard_configs_runs_on_its_config_defaults(tmp_path, install, pendulum, cli):
    site = plugin_site(tmp_path / "site", {"linear-bc": EXAMPLE_ORIGIN["entry_point"]}, example_configs=False)
    install(site)
    code, _, err = cli(*run_args("linear-bc", "pendulum-scripted", steps=4, eval_episodes=0, out=tmp_path, name="defaults"))
    assert code == 0, err
    run = json.loads((tmp_path / "defaults" / "run.json").read_text())
    folder = site / "offbench_example_plugin" / "configs" / "linear-bc"
    assert run["config_sources"] == [f"linear-bc Config defaults (no standard config in {folder})", "--set eval_episodes=0 steps=4"]
    assert run["config"]["hidden_dim"] == 0 and run["config"]["batch_size"] == 256  # LinearBCConfig's and TrainConfig's defaults


def test_sweep_runs_the_plugin_over_two_seeds_and_a_board_verifies_them(example, pendulum, cli, tmp_path, monkeypatch):
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'name = "plugin"\nbaselines = ["linear-bc"]\ndatasets = ["pendulum-scripted"]\nseeds = [0, 1]\n'
        "[set]\nsteps = 20\nbatch_size = 32\nlog_every = 10\neval_every = 20\neval_episodes = 1\ncheckpoint_every = 20\n"
    )
    code, _, err = cli("sweep", spec, "--runs", tmp_path / "runs", "--workers", "2")
    assert code == 0, err
    runs = sorted(p.parent for p in (tmp_path / "runs").glob("*/run.json"))
    assert len(runs) == 2 and {json.loads((r / "run.json").read_text())["seed"] for r in runs} == {0, 1}
    assert all(json.loads((r / "run.json").read_text())["method"] == EXAMPLE_ORIGIN and (r / "summary.json").is_file() for r in runs)
    submit_verified_then_catch_tampering(runs, tmp_path, monkeypatch)


def submit_verified_then_catch_tampering(runs: list[Path], tmp_path: Path, monkeypatch) -> None:
    """The plugin's runs go on a board verified (replayed from their checkpoints), shown as the plugin's; a
    returned value edited in a copy's evaluations.jsonl (and everywhere else it shows) is caught by --verify."""
    from run_dirs import pendulum_board

    from offbench.leaderboard.scoring import benchmark_card
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit
    from offbench.tracking.read_run import Refused

    pendulum_board(tmp_path, monkeypatch, min_seeds=2, evaluation={"episodes": 1, "every_steps": 20, "steps": 20})
    tampered = [shutil.copytree(run, tmp_path / "tampered" / run.name) for run in runs]
    [path] = submit(load_spec("pendulum-scripted"), runs, render=False, verify=True)
    entry = json.loads(path.read_text())
    assert entry["method"] == EXAMPLE_ORIGIN and {r["verification"]["status"] for r in entry["runs"]} == {"verified"}

    lines = [json.loads(line) for line in (tampered[0] / "evaluations.jsonl").read_text().splitlines()]
    lines[-1]["returns"][0] += 50.0
    lines[-1]["mean_return"] += 50.0
    lines[-1]["normalized_score"] = benchmark_card("pendulum-scripted").normalise(lines[-1]["mean_return"])
    (tampered[0] / "evaluations.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary = json.loads((tampered[0] / "summary.json").read_text())
    for which in ("final", "best"):
        if summary[which]["step"] == lines[-1]["step"]:
            summary[which].update(mean_return=lines[-1]["mean_return"], normalized_score=lines[-1]["normalized_score"])
    (tampered[0] / "summary.json").write_text(json.dumps(summary))
    shutil.rmtree(load_spec("pendulum-scripted").entries_dir)
    with pytest.raises(Refused, match=r"refused \(verify\): final evaluation, episode 0: replayed return"):
        submit(load_spec("pendulum-scripted"), tampered, render=False, verify=True)


def test_plugin_trains_data_parallel(example, pendulum, cli, tmp_path):
    """--nproc relaunches offbench under torchrun: every process finds the plugin through its environment."""
    code, _, err = cli(*run_args("linear-bc", "pendulum-scripted", *TINY_RUN, "--nproc", "2", steps=20, out=tmp_path, name="two"))
    assert code == 0, err
    run = json.loads((tmp_path / "two" / "run.json").read_text())
    assert run["method"] == EXAMPLE_ORIGIN and run["distributed"]["world_size"] == 2 and (tmp_path / "two" / "summary.json").is_file()


# ---------------------------------------------------------------------------------------------- clashing or broken plugins


def test_a_plugin_may_not_take_a_built_in_name(tmp_path, install, pendulum, cli):
    from offbench.baselines import baseline_names

    install(plugin_site(tmp_path / "site", {"bc": EXAMPLE_ORIGIN["entry_point"]}, distribution="rogue-plugin", version="2.0"))
    code, _, err = cli("run", "baseline", "bc", "--dataset", "pendulum-scripted", "--out", tmp_path / "runs")
    assert code == 2
    assert one_line(err).endswith(
        "plugin baseline 'bc' (rogue-plugin 2.0, offbench_example_plugin.linear_bc:LinearBC): "
        "'bc' is a built-in baseline, which a plugin may not replace (rename the entry point)"
    )
    assert "bc" not in baseline_names() and "dt" in baseline_names() and not (tmp_path / "runs").exists()


def test_two_distributions_may_not_register_one_name(tmp_path, example, install):
    from offbench.baselines import get_baseline
    from offbench.errors import OffbenchError

    install(
        plugin_site(tmp_path / "other-site", {"linear-bc": "other_pkg:LinearBC"}, distribution="other-plugin", version="3.1", example=False)
    )
    with pytest.raises(OffbenchError, match=r"^plugin baseline 'linear-bc' \(.+\): the name is also registered by .+ \(uninstall one"):
        get_baseline("linear-bc")


BROKEN_MODULES = {
    "raises.py": 'raise ImportError("needs the quantum package")\n',
    "misnamed.py": "from offbench_example_plugin.linear_bc import LinearBC\n\n\nclass Misnamed(LinearBC):\n    name = 'something-else'\n",
}


@pytest.fixture
def broken(tmp_path, example, install) -> None:
    """The example plus a distribution "broken-plugins 1.0" with a module that fails to import and a class whose
    name is not its entry point's."""
    site = plugin_site(
        tmp_path / "broken-site",
        {"raises": "broken_plugin_modules.raises:Method", "misnamed": "broken_plugin_modules.misnamed:Misnamed"},
        distribution="broken-plugins",
        version="1.0",
        example=False,
    )
    (site / "broken_plugin_modules").mkdir()
    for name, text in {"__init__.py": "", **BROKEN_MODULES}.items():
        (site / "broken_plugin_modules" / name).write_text(text)
    install(site)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("raises", "(broken-plugins 1.0, broken_plugin_modules.raises:Method): cannot import it (ImportError: needs the quantum package)"),
        (
            "misnamed",
            "(broken-plugins 1.0, broken_plugin_modules.misnamed:Misnamed): its class attribute name is 'something-else', not the "
            "registered 'misnamed'",
        ),
    ],
)
def test_a_broken_plugin_is_one_line_when_asked_for(broken, pendulum, cli, tmp_path, name, problem):
    code, _, err = cli("run", "baseline", name, "--dataset", "pendulum-scripted", "--out", tmp_path / "runs")
    assert code == 2 and one_line(err).endswith(f"plugin baseline '{name}' {problem}")


def test_broken_plugins_stop_nothing_else(broken, pendulum, cli, run_cli, tmp_path):
    from offbench.baselines import baseline_names

    assert "linear-bc" in baseline_names() and not {"raises", "misnamed"} & set(baseline_names())
    code, _, err = cli("run", "baseline", "nope", "--dataset", "pendulum-scripted")
    assert code == 2 and "unknown baseline 'nope' (known: ad, bc," in one_line(err)
    assert "linear-bc" in err and err.strip().endswith("; broken plugins, ask for one to see why: misnamed, raises)")
    code, _, err = cli("run", "baseline", "ad", "--dataset", "pendulum-scripted")  # lists the baselines that have a mode
    assert code == 2 and "baselines that have one: bc, cql, dt, iql, linear-bc)" in one_line(err)
    code, _, err = cli(*run_args("bc", "pendulum-scripted", steps=4, eval_episodes=0, out=tmp_path, name="bc"))
    assert code == 0, err

    listed = run_cli("list")
    assert listed.returncode == 0 and "pendulum-scripted" in listed.stdout
    probe = (
        "import sys\nfrom offbench.cli import main\ntry:\n    main(['list'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'broken_plugin_modules', 'offbench_example_plugin')))"
    )
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert imported.stdout.strip().splitlines()[-1] == "[]"  # `offbench list` imports no plugin, and no torch


# ---------------------------------------------------------------------------------------------- offbench.testing.check_baseline


def test_check_baseline_passes_the_example_on_a_store_and_on_a_path(example, tmp_path):
    from offbench_example_plugin.linear_bc import LinearBC

    from offbench.testing import check_baseline

    store = make_store(episode_lengths=(6, 5, 7))
    check_baseline(LinearBC, {"hidden_dim": 4}, store)
    store.save(tmp_path / "tiny.h5")
    check_baseline(LinearBC, LinearBC.Config(hidden_dim=0), str(tmp_path / "tiny.h5"))


BROKEN_VARIANTS: dict[str, tuple[dict, str]] = {  # name -> (class attributes overriding LinearBC's, the rule check_baseline names)
    "state without the network": (
        {
            "state_dict": lambda self: {"optimizer": self.optimizer.state_dict()},
            "load_state_dict": lambda self, state: self.optimizer.load_state_dict(state["optimizer"]),
        },
        "state_dict must hold everything the policy uses",
    ),
    "state without the optimiser": (
        {
            "state_dict": lambda self: {"net": self.net.state_dict()},
            "load_state_dict": lambda self, state: self.net.load_state_dict(state["net"]),
        },
        "state_dict must hold everything training uses",
    ),
    "an unknown sampler": ({"sampler": "shuffled"}, "its sampler 'shuffled' is not registered"),
    "no losses": ({"update": lambda self, batch: {}}, r"update\(batch\) must return a non-empty dict of finite losses, got \{\}"),
    "continuous only, on discrete data": ({"action_kinds": ("continuous",)}, "the dataset has discrete actions"),
}


def discrete_store() -> EpisodeStore:
    """make_store's episodes with three discrete actions."""
    store = make_store(episode_lengths=(6, 5, 7))
    episodes = [{**store.episode(i), "actions": np.arange(len(store.episode(i)["actions"])) % 3} for i in range(3)]
    return EpisodeStore.from_episodes(episodes, observation_space=store.observation_space, action_space=gym.spaces.Discrete(3))


@pytest.mark.parametrize("variant", sorted(BROKEN_VARIANTS))
def test_check_baseline_names_the_rule_a_broken_class_breaks(example, variant):
    from offbench_example_plugin.linear_bc import LinearBC

    from offbench.testing import check_baseline

    attributes, rule = BROKEN_VARIANTS[variant]
    broken_class = type("BrokenLinearBC", (LinearBC,), attributes)
    store = discrete_store() if variant == "continuous only, on discrete data" else make_store(episode_lengths=(6, 5, 7))
    with pytest.raises(AssertionError, match=rf"^BrokenLinearBC: .*{rule}"):
        check_baseline(broken_class, {"hidden_dim": 4}, store)


def test_the_example_packages_own_tests_pass(example):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "examples" / "plugin" / "tests")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:]


# ---------------------------------------------------------------------------------------------- a new baseline: one module, one config
THROWAWAY_MODULE = """
from dataclasses import dataclass

import torch

from offbench.evaluation.policy import MarkovPolicy
from offbench.records import ranged


@dataclass
class MeanShiftConfig:
    hidden_dim: int = ranged(64, ge=1)
    learning_rate: float = ranged(1e-2, gt=0)


class MeanShift:
    name = "mean-shift"
    Config = MeanShiftConfig
    summary = "a tanh MLP regressed onto the actions, scaled into their bounds"
    tiny_config = {"hidden_dim": 4}
    sampler = "transitions"
    action_kinds = ("continuous",)
    evaluation_protocols = ("single-task",)
    return_conditioned = False

    def __init__(self, config, spec, device="cpu"):
        self.spec, self.device = spec, torch.device(device)
        self.high = torch.as_tensor(spec.action_space.high, device=self.device)
        self.net = torch.nn.Sequential(torch.nn.Linear(spec.observation_shape[0], config.hidden_dim), torch.nn.ReLU(),
                                       torch.nn.Linear(config.hidden_dim, spec.action_dim)).to(self.device)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=config.learning_rate)

    def act(self, observations, task_ids=None):
        return self.high * torch.tanh(self.net(observations))

    def update(self, batch):
        loss = torch.nn.functional.mse_loss(self.act(batch["observations"]), batch["actions"])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item()}

    def policy(self, options):
        return MarkovPolicy(self.act, self.spec.action_space, self.device, options)

    def state_dict(self):
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state):
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
"""
THROWAWAY_CONFIG = 'source = "a throwaway test baseline"\nsteps = 30\nbatch_size = 16\nhidden_dim = 8\nlog_every = 10\neval_every = 15\neval_episodes = 2\ncheckpoint_every = 15\n'


def test_a_new_baseline_is_one_module_and_one_config(tmp_path, install, pendulum, cli):
    """Written from scratch beside nothing else of offbench: it trains on its standard config, evaluates, re-evaluates
    and passes check_baseline with its own tiny_config."""
    from offbench.baselines import baseline_names, get_baseline
    from offbench.testing import check_baseline

    site = plugin_site(tmp_path / "site", {"mean-shift": "mean_shift:MeanShift"}, distribution="mean-shift", example=False)
    (site / "mean_shift.py").write_text(THROWAWAY_MODULE)
    (site / "configs" / "mean-shift").mkdir(parents=True)
    (site / "configs" / "mean-shift" / "default.toml").write_text(THROWAWAY_CONFIG)
    install(site)

    assert "mean-shift" in baseline_names()
    code, out, err = cli("run", "baseline", "mean-shift", "--dataset", "pendulum-scripted", "--out", tmp_path / "runs", "--name", "new")
    assert code == 0, err
    run = json.loads((tmp_path / "runs" / "new" / "run.json").read_text())
    assert run["config_sources"] == [str(site / "configs" / "mean-shift" / "default.toml")] and run["config"]["hidden_dim"] == 8
    evaluations = [json.loads(line) for line in (tmp_path / "runs" / "new" / "evaluations.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evaluations] == [15, 30] and all(len(e["returns"]) == 2 for e in evaluations)
    code, out, err = cli("evaluate", tmp_path / "runs" / "new")
    assert code == 0 and "step 30" in out, err
    check_baseline(get_baseline("mean-shift"), None, pendulum)
