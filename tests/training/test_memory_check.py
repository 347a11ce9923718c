"""A config whose update cannot fit the memory available is refused in one line before the run directory is made
(offbench/training/memory.py, called from `start_run`); one that fits runs as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_runs import CONFIGS, run_args

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


def ad_estimate(darkroom, *overrides: str, config_file: Path | None = None):
    """AD's estimate under `config_file` (the published ad-eps config by default) and `overrides`."""
    from offbench.baselines import get_baseline
    from offbench.data.spec import DatasetSpec
    from offbench.training.config import resolve_config
    from offbench.training.memory import estimate_update_bytes

    cls = get_baseline("ad")
    published = builtin_dir("baselines") / "ad" / "default.toml"
    return estimate_update_bytes(
        cls, resolve_config(cls, "darkroom-small", config_file or published, list(overrides)), DatasetSpec.from_store(darkroom)
    )


def test_a_config_over_the_limit_is_refused_in_one_line_with_no_run_directory(darkroom, cli, tmp_path, monkeypatch):
    from offbench.training.memory import estimate_update_bytes  # noqa: F401 - the module the check lives in

    monkeypatch.delenv("OFFBENCH_SKIP_MEMORY_CHECK", raising=False)
    limit(monkeypatch, 1024**2)  # 1 MB: below any update
    code, _, err = cli(*run_args("ad", "darkroom-small", tiny=True, steps=1, out=tmp_path / "runs"))
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "needs about" in err and "available on cpu" in err and "batch" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_the_same_config_under_a_large_limit_runs(darkroom, cli, tmp_path, monkeypatch):
    monkeypatch.delenv("OFFBENCH_SKIP_MEMORY_CHECK", raising=False)
    limit(monkeypatch, 64 * GB)
    code, _, err = cli(*run_args("ad", "darkroom-small", tiny=True, steps=1, eval_episodes=0, out=tmp_path / "runs", name="run"))
    assert code == 0, err
    assert (tmp_path / "runs" / "run" / "run.json").is_file()


def test_the_published_ad_config_on_bandit_small_is_refused_naming_what_fits(bandit, cli, tmp_path, monkeypatch):
    """The newcomer's command with the published ad-eps config: refused before anything is written (it was killed
    by the kernel at 24 GB), naming a batch size that fits and the CPU-sized family file."""
    limit(monkeypatch, 20 * GB)
    published = builtin_dir("baselines") / "ad" / "default.toml"
    code, _, err = cli(
        "run", "baseline", "ad", "--dataset", "bandit-small", "--config", published, "--steps", "1", "--out", tmp_path / "runs"
    )
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "batch 512" in err and "20.0 GB is available" in err
    assert "--set batch_size=" in err and "baselines/ad/bandit.toml" in err
    fits = int(err.split("--set batch_size=")[1].split()[0])
    assert 1 <= fits < 512
    micro = int(err.split("--set micro_batch=")[1].split()[0])  # or the same batch, split
    assert fits <= micro < 512 and "micro_batch=auto" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_the_estimate_is_affine_in_the_batch_and_names_the_largest_batch_that_fits(darkroom):
    small, large = ad_estimate(darkroom, "batch_size=64"), ad_estimate(darkroom)
    assert large.total > 24 * GB > small.total  # the published size does not fit 24 GB; batch 64 does
    assert large.largest_batch(small.total) in (63, 64)
    assert large.per_row == pytest.approx(small.per_row) and large.fixed == pytest.approx(small.fixed)


def test_available_bytes_reads_the_machine():
    from offbench.training.memory import available_bytes

    available = available_bytes("cpu")
    assert available is None or 0 < available < 2**50
    assert available_bytes("meta") is None


def test_activations_scale_with_the_micro_batch_and_the_sampled_batch_with_the_batch(darkroom):
    whole, split = ad_estimate(darkroom), ad_estimate(darkroom, "micro_batch=64")
    assert split.total == pytest.approx(whole.fixed + 64 * whole.per_row + 512 * whole.per_sample)
    assert split.total < whole.total / 4 and split.largest_micro_batch(split.total) == 64
    assert ad_estimate(darkroom, "micro_batch=1024").total == pytest.approx(whole.total)  # a micro-batch past the batch: the batch


def test_a_baseline_states_its_own_memory_shape(darkroom):
    """A new sequence baseline (a plugin) is estimated from its own `memory_shape`, with no list to edit."""
    from offbench.baselines import get_baseline
    from offbench.baselines.base import TransformerShape
    from offbench.data.spec import DatasetSpec
    from offbench.training.config import resolve_config
    from offbench.training.memory import estimate_update_bytes

    ad = get_baseline("ad")

    class Renamed(ad):
        name = "renamed-ad"

    class Flat(ad):
        name = "flat-ad"
        memory_shape = None

    config, spec = resolve_config(ad, "darkroom-small"), DatasetSpec.from_store(darkroom)
    shape = ad.memory_shape(config.baseline)
    assert shape == TransformerShape(
        shape.tokens,
        config.baseline.hidden_dim,
        config.baseline.num_layers,
        config.baseline.num_heads,
        "sdpa",
        config.baseline.attention_dropout,
    )
    same, flat = (estimate_update_bytes(cls, config, spec) for cls in (Renamed, Flat))
    assert same.total == estimate_update_bytes(ad, config, spec).total and f"s={shape.tokens}" in same.formula
    assert "Linear features" in flat.formula


def test_headless_ad_counts_its_action_prompt_and_keeps_its_attention_written_out(darkroom):
    """Headless-AD's training sequence is the action-set prompt (at most embedding_dim actions: the estimate takes the
    most) and a token per step; its prompt bias writes the attention out, so the s x s matrix is counted even
    without attention dropout."""
    from offbench.baselines import get_baseline
    from offbench.baselines.base import TransformerShape
    from offbench.data.spec import DatasetSpec
    from offbench.training.config import resolve_config
    from offbench.training.memory import estimate_update_bytes

    cls = get_baseline("headless-ad")
    config, spec = resolve_config(cls, "darkroom-small"), DatasetSpec.from_store(darkroom)
    model = config.baseline
    assert model.attention_dropout == 0
    assert cls.memory_shape(model) == TransformerShape(
        model.context_steps + model.embedding_dim, model.hidden_dim, model.num_layers, model.num_heads, "explicit", 0.0
    )
    estimate = estimate_update_bytes(cls, config, spec)
    assert f"s={model.context_steps + model.embedding_dim}" in estimate.formula and "16 H s^2" in estimate.formula
    wider = estimate_update_bytes(cls, resolve_config(cls, "darkroom-small", None, [f"embedding_dim={2 * model.embedding_dim}"]), spec)
    assert wider.per_row > estimate.per_row  # a longer prompt: more tokens per row


def test_auto_picks_the_largest_micro_batch_that_fits_and_run_json_records_it(darkroom, cli, tmp_path, monkeypatch):
    """OFFBENCH_MEMORY_LIMIT below the whole batch's update: `micro_batch = "auto"` trains in the largest micro-batch
    that fits instead of refusing; the same config without it is refused, naming that micro-batch."""
    import json

    monkeypatch.delenv("OFFBENCH_SKIP_MEMORY_CHECK", raising=False)
    whole = ad_estimate(darkroom, "batch_size=64", config_file=CONFIGS / "ad-tiny.toml")
    limit = whole.fixed + 64 * whole.per_sample + 10.5 * whole.per_row  # micro-batches of 10 fit, 11 do not
    monkeypatch.setenv("OFFBENCH_MEMORY_LIMIT", str(int(limit)))

    def run(name: str, **micro_batch):
        return cli(
            *run_args(
                "ad", "darkroom-small", tiny=True, steps=1, batch_size=64, eval_episodes=0, **micro_batch, out=tmp_path / "runs", name=name
            )
        )

    code, _, err = run("auto", micro_batch="auto")
    assert code == 0, err
    assert json.loads((tmp_path / "runs" / "auto" / "run.json").read_text())["config"]["micro_batch"] == 10
    code, _, err = run("refused")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--set micro_batch=10 fits" in err, err


def test_the_memory_limit_variable_reads_sizes_and_refuses_others_in_one_line(monkeypatch):
    from offbench.errors import OffbenchError
    from offbench.training.memory import available_bytes

    monkeypatch.setenv("OFFBENCH_MEMORY_LIMIT", "512M")
    assert available_bytes("cpu") == 512 * 1024**2
    monkeypatch.setenv("OFFBENCH_MEMORY_LIMIT", "lots")
    with pytest.raises(OffbenchError, match=r"^OFFBENCH_MEMORY_LIMIT must be a size in bytes such as 8G, 512M or 1000000, got 'lots'$"):
        available_bytes("cpu")
