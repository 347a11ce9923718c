"""Off a terminal (output to a pipe or a file, as under SLURM) `progress_bar` writes plain lines instead of nothing."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import time
    import offbench.utils as utils

    utils.PLAIN_PROGRESS_EVERY_S = 0.05
    with utils.progress_bar(False, "dt pendulum", 6, unit="updates", fields=("rate", "info")) as advance:
        for step in range(1, 7):
            time.sleep(0.03)
            advance(1, rate="99 it/s", info=f"loss {step / 10:.1f} eval 12.5")
    """
)


def test_plain_progress_lines_when_output_is_a_pipe():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("dt pendulum:")]
    assert len(lines) >= 2, result.stderr  # periodic lines, not one frame at the end
    assert "\x1b[" not in result.stderr  # no terminal control codes in a log
    assert lines[-1].startswith("dt pendulum: 6/6 updates 100%")
    assert "it/s" in lines[-1] and "loss 0.6 eval 12.5" in lines[-1]
    assert any("ETA" in line for line in lines[:-1])


def test_quiet_prints_nothing():
    script = SCRIPT.replace("progress_bar(False", "progress_bar(True")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == ""
