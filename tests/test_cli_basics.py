"""What a newcomer types first: `offbench --version`, and `run baseline --help` naming the baselines it can run."""

from __future__ import annotations

from offbench.baselines import BASELINES


def test_version_prints_and_exits(run_cli):
    import offbench

    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"offbench {offbench.__version__}"


def test_run_baseline_help_lists_every_builtin_baseline_and_plugins(run_cli):
    proc = run_cli("run", "baseline", "--help")
    text = " ".join(proc.stdout.split())  # rich wraps the help text
    assert proc.returncode == 0 and all(name in text for name in BASELINES) and "plugin" in text
