"""`offbench sweep` with the local executor on real runs: finished runs are skipped, failures are retried
then reported with their error, Ctrl-C stops cleanly, and a sweep killed mid-way (one of its runs
killed first) ends, once re-run, with the same results as an uninterrupted sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import TRAINING_CONFIGS as CONFIGS
from helpers import offbench_command
from rich.console import Console

from offbench.sweep import runner
from offbench.sweep.executors import Outcome
from offbench.sweep.spec import load_sweep


def write_spec(tmp_path: Path, seeds=(0, 1), datasets=("pendulum-scripted",), extra: str = "") -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(
        f'name = "t"\nbaselines = ["bc"]\ndatasets = {json.dumps(list(datasets))}\nseeds = {list(seeds)}\n'
        f'config = "{CONFIGS / "bc-tiny.toml"}"\n{extra}'
    )
    return path


def metrics_without_time(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "time_s"} for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def last_step(run_dir: Path) -> int:
    lines = (
        [line for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.endswith("}")]
        if (run_dir / "metrics.jsonl").exists()
        else []
    )
    return json.loads(lines[-1])["step"] if lines else 0


def test_sweep_runs_everything_reports_failures_then_skips_finished_runs(pendulum, cli, tmp_path):
    missing = str(tmp_path / "missing.h5")
    spec = write_spec(tmp_path, seeds=(0,), datasets=("pendulum-scripted", missing), extra="[grid]\nbatch_size = [16, 32]\n")
    planned = load_sweep(spec).expand()
    good = [r.name for r in planned if r.dataset == "pendulum-scripted"]
    code, _, err = cli("sweep", spec, "--runs", tmp_path / "runs", "--workers", "2")
    assert code == 1  # the runs on the missing file fail (bad input: not retried), the others finish
    assert all((tmp_path / "runs" / n / "summary.json").is_file() for n in good) and len(good) == 2
    assert "2 done, 2 failed (2 finished" in err
    assert err.count("after 1 attempt(s): offbench: error: " + missing) == 2
    stamps = {n: (tmp_path / "runs" / n / "run.json").stat().st_mtime_ns for n in good}

    code, _, err = cli("sweep", spec, "--runs", tmp_path / "runs")
    assert code == 1 and "(0 finished" in err
    assert {n: (tmp_path / "runs" / n / "run.json").stat().st_mtime_ns for n in good} == stamps
    code, out, _ = cli("sweep", "status", spec, "--runs", tmp_path / "runs")
    assert code == 0 and "2 done, 0 stopped, 2 failed, 0 queued" in out and "missing.h5" in out


class ScriptedExecutor:
    """Stands in for the processes: each run's attempts end with the given exit codes, 0 writing its summary."""

    slots, threads = 2, 1

    def __init__(self, folder: Path, codes: dict[str, list[int]]):
        self.folder, self.codes, self.started, self.pending = folder, codes, [], []

    def start(self, job):
        self.started.append(job.name)
        self.pending.append(job.name)

    def wait(self, timeout):
        ended, self.pending = self.pending, []
        outcomes = []
        for name in ended:
            code = self.codes[name].pop(0)
            if code == 0:
                (self.folder / name).mkdir(parents=True, exist_ok=True)
                (self.folder / name / "summary.json").write_text("{}")
            outcomes.append(Outcome(name, code, "" if code == 0 else f"error {code}"))
        return outcomes

    def stop(self):
        pass

    close = stop


def test_retries_then_failure_and_bad_input_is_not_retried(tmp_path):
    spec = load_sweep(write_spec(tmp_path, seeds=(0, 1, 2), extra="retries = 2\n"))
    runs = spec.expand()
    codes = {runs[0].name: [1, -9, 0], runs[1].name: [1, 1, 1, 0], runs[2].name: [2, 0]}
    pool = ScriptedExecutor(tmp_path / "runs", {k: list(v) for k, v in codes.items()})
    tracker = runner.execute(spec, runs, tmp_path / "runs", pool, Console(file=open(os.devnull, "w")))
    assert [pool.started.count(r.name) for r in runs] == [3, 3, 1]
    assert [tracker.state[r.name] for r in runs] == ["done", "failed", "failed"]
    assert tracker.errors[runs[1].name] == "error 1" and tracker.errors[runs[2].name] == "error 2"
    assert set(runner.read_state(tmp_path / "runs")["failed"]) == {runs[1].name, runs[2].name}


def sweep_process(spec: Path, runs: Path) -> subprocess.Popen:
    """The sweep as a terminal would start it: Ctrl-C's default handling, whatever this test process inherited
    (an ignored SIGINT stays ignored across exec, and Python then never raises KeyboardInterrupt)."""
    return subprocess.Popen(
        offbench_command("sweep", spec, "--runs", runs, "--workers", "2"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


LONG = "[set]\nsteps = 1200\nlog_every = 50\ncheckpoint_every = 300\neval_every = 600\n"


@pytest.mark.slow  # three runs, twice, in processes: ~30 s on a quiet 2-core machine
def test_killed_sweep_and_worker_rerun_ends_like_an_uninterrupted_sweep(pendulum, cli, tmp_path):
    spec = write_spec(tmp_path, seeds=(0, 1, 2), extra=LONG)
    names = [r.name for r in load_sweep(spec).expand()]
    runs = tmp_path / "killed"
    sweep = sweep_process(spec, runs)
    first = runs / names[0]
    wait_for(lambda: last_step(first) >= 400, "the first run to pass its first checkpoint")
    worker = next(pid for pid in children(sweep.pid) if names[0] in Path(f"/proc/{pid}/cmdline").read_text())
    os.kill(worker, signal.SIGKILL)  # the sweep retries it: a resume from step 300
    wait_for(lambda: json.loads((first / "run.json").read_text()).get("resumes"), "the killed run to be resumed")
    wait_for(lambda: last_step(first) >= 700 or (first / "summary.json").exists(), "the resumed run to go on")
    workers = children(sweep.pid)
    sweep.kill()
    sweep.wait(timeout=30)
    wait_for(lambda: not any(alive(pid) for pid in workers), "the runs to die with the sweep", timeout=30)
    assert not all((runs / n / "summary.json").exists() for n in names), "the sweep finished before it could be killed"

    code, _, err = cli("sweep", spec, "--runs", runs, "--workers", "2")
    assert code == 0, err
    code, _, err = cli("sweep", spec, "--runs", tmp_path / "whole", "--workers", "2")
    assert code == 0, err
    for name in names:
        assert [m["step"] for m in metrics_without_time(runs / name)] == list(range(50, 1201, 50))
        assert metrics_without_time(runs / name) == metrics_without_time(tmp_path / "whole" / name)
        assert (runs / name / "evaluations.jsonl").read_text() == (tmp_path / "whole" / name / "evaluations.jsonl").read_text()


def test_ctrl_c_stops_the_runs_cleanly_and_the_next_invocation_continues(pendulum, cli, tmp_path):
    spec = write_spec(tmp_path, seeds=(0,), extra=LONG)
    (name,) = [r.name for r in load_sweep(spec).expand()]
    sweep = sweep_process(spec, tmp_path / "runs")
    wait_for(lambda: last_step(tmp_path / "runs" / name) >= 350, "the run to pass its first checkpoint")
    workers = children(sweep.pid)
    sweep.send_signal(signal.SIGINT)
    _, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 130 and "run the same command again to continue" in err, (sweep.returncode, err[-2000:])
    assert workers and not any(alive(pid) for pid in workers)
    if (tmp_path / "runs" / name / "summary.json").exists():
        pytest.fail("the run finished before Ctrl-C reached it")
    code, out, _ = cli("sweep", "status", spec, "--runs", tmp_path / "runs")
    assert "stopped" in out and "0 done, 1 stopped" in out
    code, _, err = cli("sweep", spec, "--runs", tmp_path / "runs")
    assert code == 0, err
    assert json.loads((tmp_path / "runs" / name / "run.json").read_text())["resumes"][0]["from_step"] >= 300


def test_off_a_terminal_each_ended_run_and_the_counts_are_plain_lines(tmp_path, monkeypatch):
    """A sweep logging to a file (SLURM) says what happened as it happens, not one table frame at the end."""
    import io

    monkeypatch.setattr(runner, "PLAIN_PROGRESS_EVERY_S", 0.0)
    spec = load_sweep(write_spec(tmp_path, seeds=(0, 1), extra="retries = 0\n"))
    runs = spec.expand()
    pool = ScriptedExecutor(tmp_path / "runs", {runs[0].name: [0], runs[1].name: [1]})
    log = io.StringIO()  # not a terminal
    tracker = runner.execute(spec, runs, tmp_path / "runs", pool, Console(file=log, width=200))
    runner.print_summary(tracker, Console(file=log, width=200))
    lines = log.getvalue().splitlines()
    assert "\x1b[" not in log.getvalue()
    assert any(line.endswith(f"{runs[0].name} done") for line in lines)
    assert any(line.endswith(f"{runs[1].name} failed: error 1") for line in lines)
    assert any(line[8:].startswith(" 1 done, 1 failed") for line in lines)  # the periodic counts
    assert lines[-2].startswith("summary: 1 done, 1 failed")  # its own line, then the failed run's


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="needs Linux autogroup scheduling (/proc/self/autogroup)")
def test_a_run_in_its_own_session_runs_at_the_sweeps_niceness(tmp_path):
    """A run gets its own session, and under autogroup a session shares the CPU at nice 0 whatever its processes'
    nice: without carrying the sweep's niceness over, `nice offbench sweep` would not lower its runs' share."""
    probe = "print(open('/proc/self/autogroup').read())"  # "/autogroup-N nice K"
    sweep = (
        "import os, sys; from pathlib import Path; from offbench.sweep.executors import Job, spawn; os.nice(7); "
        f"spawn(Job('probe', [sys.executable, '-c', {probe!r}], {{}}, Path(sys.argv[1]))).wait()"
    )
    subprocess.run([sys.executable, "-c", sweep, str(tmp_path / "probe.log")], check=True)
    assert (tmp_path / "probe.log").read_text().split()[-1] == str(min(19, os.getpriority(os.PRIO_PROCESS, 0) + 7))
