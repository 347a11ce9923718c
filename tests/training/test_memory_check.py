"""A config whose update cannot fit the memory available is refused in one line before the run directory is made
(offbench/training/memory.py, called from `start_run`); one that fits runs as before."""

from __future__ import annotations

import pytest

from helpers import TRAINING_CONFIGS as CONFIGS
from offbench.paths import builtin_dir

GB = 1024**3


@pytest.fixture(scope="session")
def bandit_home(tmp_path_factory):
    from conftest import generated_home

    return generated_home(tmp_path_factory, "bandit-small")


@pytest.fixture
def bandit(bandit_home, monkeypatch):
    monkeypatch.setenv("OFFBENCH_HOME", str(bandit_home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("OFFBENCH_SKIP_MEMORY_CHECK", raising=False)


def limit(monkeypatch, nbytes: float) -> None:
    monkeypatch.setattr("offbench.training.memory.available_bytes", lambda device="cpu": float(nbytes))


def test_a_config_over_the_limit_is_refused_in_one_line_with_no_run_directory(darkroom, cli, tmp_path, monkeypatch):
    from offbench.training.memory import estimate_update_bytes  # noqa: F401 - the module the check lives in

    monkeypatch.delenv("OFFBENCH_SKIP_MEMORY_CHECK", raising=False)
    limit(monkeypatch, 1024**2)  # 1 MB: below any update
    code, _, err = cli("run", "baseline", "ad", "--dataset", "darkroom-small", "--config", CONFIGS / "ad-tiny.toml",
                       "--steps", "1", "--out", tmp_path / "runs")
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "needs about" in err and "available on cpu" in err and "batch" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_the_same_config_under_a_large_limit_runs(darkroom, cli, tmp_path, monkeypatch):
    monkeypatch.delenv("OFFBENCH_SKIP_MEMORY_CHECK", raising=False)
    limit(monkeypatch, 64 * GB)
    code, _, err = cli("run", "baseline", "ad", "--dataset", "darkroom-small", "--config", CONFIGS / "ad-tiny.toml",
                       "--steps", "1", "--set", "eval_episodes=0", "--out", tmp_path / "runs", "--name", "run")
    assert code == 0, err
    assert (tmp_path / "runs" / "run" / "run.json").is_file()


def test_the_published_ad_config_on_bandit_small_is_refused_naming_what_fits(bandit, cli, tmp_path, monkeypatch):
    """The newcomer's command with the published ad-eps config: refused before anything is written (it was killed
    by the kernel at 24 GB), naming a batch size that fits and the CPU-sized family file."""
    limit(monkeypatch, 20 * GB)
    published = builtin_dir("baselines") / "ad" / "default.toml"
    code, _, err = cli("run", "baseline", "ad", "--dataset", "bandit-small", "--config", published, "--steps", "1",
                       "--out", tmp_path / "runs")
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "batch 512" in err and "20.0 GB is available" in err
    assert "--set batch_size=" in err and "baselines/ad/bandit.toml" in err
    fits = int(err.split("--set batch_size=")[1].split()[0])
    assert 1 <= fits < 512
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_the_estimate_is_affine_in_the_batch_and_names_the_largest_batch_that_fits(darkroom):
    from offbench.baselines import get_baseline
    from offbench.data.spec import DatasetSpec
    from offbench.training.config import resolve_config
    from offbench.training.memory import estimate_update_bytes

    cls = get_baseline("ad")
    spec = DatasetSpec.from_store(darkroom)
    published = builtin_dir("baselines") / "ad" / "default.toml"
    small = estimate_update_bytes(cls, resolve_config(cls, "darkroom-small", published, ["batch_size=64"]), spec)
    large = estimate_update_bytes(cls, resolve_config(cls, "darkroom-small", published), spec)
    assert large.total > 24 * GB > small.total  # the published size does not fit 24 GB; batch 64 does
    assert large.largest_batch(small.total) in (63, 64)
    assert large.per_row == pytest.approx(small.per_row) and large.fixed == pytest.approx(small.fixed)


def test_available_bytes_reads_the_machine():
    from offbench.training.memory import available_bytes

    available = available_bytes("cpu")
    assert available is None or 0 < available < 2**50
    assert available_bytes("meta") is None
