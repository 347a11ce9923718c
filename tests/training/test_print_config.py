"""`offbench run baseline NAME --dataset ID --print-config`: the resolved config and its sources, nothing run or written."""

from __future__ import annotations

import tomllib


def test_print_config_prints_the_resolved_config_and_writes_nothing(cli, tmp_path, pendulum, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(
        "run", "baseline", "bc", "--dataset", "pendulum-scripted", "--print-config", "--set", "learning_rate=0.001", "--steps", "20"
    )
    assert code in (0, None), err
    assert list(tmp_path.iterdir()) == []  # no runs/ folder, no run directory
    values = tomllib.loads(out)
    assert values["learning_rate"] == 0.001 and values["steps"] == 20 and "batch_size" in values and "hidden_dim" in values
    assert "bc/pendulum-scripted.toml" in out and "--set learning_rate=0.001 steps=20" in out  # its sources

    config = tmp_path / "printed.toml"
    config.write_text(out)  # what it prints is a config file `--config` reads back to the same values
    code, again, err = cli("run", "baseline", "bc", "--dataset", "pendulum-scripted", "--config", config, "--print-config")
    assert code in (0, None), err
    assert tomllib.loads(again) == values and str(config) in again
    assert [p.name for p in tmp_path.iterdir()] == ["printed.toml"]


def test_print_config_refuses_bad_keys_like_a_run(cli, tmp_path, pendulum, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("run", "baseline", "bc", "--dataset", "pendulum-scripted", "--print-config", "--set", "lr=1")
    assert code == 2 and "unknown config key 'lr'" in err and out == ""
    assert list(tmp_path.iterdir()) == []
