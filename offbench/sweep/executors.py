"""Where a sweep's runs execute: a string-keyed registry of executors with one small protocol.

Every run is one `python -m offbench run baseline ...` process (its own torch threads, its own crash),
whatever the executor: `local` starts them on this machine, `ray` as Ray tasks on a cluster. The
process dies with whoever started it (PR_SET_PDEATHSIG on Linux), so a killed sweep leaves no run
writing behind its back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from offbench.errors import OffbenchError, require
from offbench.utils import carry_niceness_into_session, die_with_parent

EXIT_BAD_INPUT = 2  # offbench's exit code for input a retry cannot fix
STOP_GRACE_S = 60  # how long a stopped run gets to exit on SIGINT before SIGKILL
# Environment a run process needs from the sweep's (Ray workers do not share the driver's environment).
FORWARDED_ENV = ("OFFBENCH_HOME", "OFFBENCH_LEADERBOARDS", "PYTHONPATH", "MUJOCO_GL", "WANDB_MODE")


@dataclass(frozen=True)
class Job:
    """One attempt at one run: the command line and where its output goes."""

    name: str
    argv: list[str]
    env: dict[str, str]  # set on top of the executing process's environment
    log: Path  # stdout and stderr of the run, appended


@dataclass(frozen=True)
class Outcome:
    name: str
    returncode: int  # negative: killed by that signal
    error: str  # the last line of the run's output when it failed, else ""


class Executor(Protocol):
    slots: int  # runs at once
    threads: int  # torch threads per run

    def start(self, job: Job) -> None: ...
    def wait(self, timeout: float) -> list[Outcome]: ...  # the runs that ended within `timeout` seconds
    def stop(self) -> None: ...  # interrupt every running run (they checkpointed; a resume continues them)
    def close(self) -> None: ...


def offbench_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "offbench", *args]


def forwarded_env() -> dict[str, str]:
    env = {key: os.environ[key] for key in FORWARDED_ENV if key in os.environ}
    if "PYTHONPATH" in env:  # a relative entry (PYTHONPATH=.) means nothing in another working directory
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    return env


def thread_env(threads: int) -> dict[str, str]:
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def prepare_run_process() -> None:
    """In the run's process before it starts: it dies with the sweep, and runs at the sweep's niceness."""
    die_with_parent()
    carry_niceness_into_session()


def spawn(job: Job) -> subprocess.Popen:
    """Start a run process in its own session (a terminal's Ctrl-C reaches only the sweep, which stops
    its runs itself), at the sweep's niceness, its output appended to the job's log."""
    job.log.parent.mkdir(parents=True, exist_ok=True)
    with open(job.log, "ab") as log:
        return subprocess.Popen(
            job.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **job.env},
            start_new_session=True,
            preexec_fn=prepare_run_process,
        )


def last_line(log: Path) -> str:
    """The last non-empty line of a log (an OffbenchError's one line, or a traceback's exception line)."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 8192))
            lines = [line.strip() for line in handle.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def outcome(job: Job, returncode: int) -> Outcome:
    if returncode == 0:
        return Outcome(job.name, 0, "")
    error = last_line(job.log) if returncode > 0 else f"killed by {signal.Signals(-returncode).name}"
    return Outcome(job.name, returncode, error or f"exit code {returncode}")


def interrupt(process: subprocess.Popen) -> None:
    """SIGINT (the trainer stops at once; its last checkpoint stays), SIGKILL if it does not exit in time."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_job(job: Job) -> Outcome:
    """Run one job to its end in this process's thread (what a Ray task does)."""
    process = spawn(job)
    try:
        return outcome(job, process.wait())
    except BaseException:  # a cancelled task (KeyboardInterrupt) or a dying worker stops its run first
        interrupt(process)
        raise


# ---------------------------------------------------------------------------------------------- local
def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class LocalExecutor:
    """Run processes on this machine: `workers` at once (default: the cores), the cores split between them."""

    def __init__(self, workers: int | None = None, threads: int | None = None):
        cores = usable_cores()
        self.slots = workers or cores
        self.threads = threads or max(1, cores // self.slots)
        self.running: dict[str, tuple[Job, subprocess.Popen]] = {}

    def start(self, job: Job) -> None:
        self.running[job.name] = (job, spawn(Job(job.name, job.argv, {**job.env, **thread_env(self.threads)}, job.log)))

    def wait(self, timeout: float) -> list[Outcome]:
        import time

        deadline = time.monotonic() + timeout
        while True:
            ended = [(name, process.returncode) for name, (_, process) in self.running.items() if process.poll() is not None]
            if ended or time.monotonic() >= deadline:
                return [outcome(self.running.pop(name)[0], code) for name, code in ended]
            time.sleep(0.05)

    def stop(self) -> None:
        for _, process in self.running.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for _, process in self.running.values():
            interrupt(process)
        self.running.clear()

    def close(self) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------- ray
class RayExecutor:
    """Ray tasks, each running one run process on whichever node has `threads` free CPUs.

    Connects to `address` (a running cluster: `ray start --head` prints it), to the cluster this process
    already joined (ray.init called before), or starts a local one. Run directories and the data must be
    reachable under the same paths on every node (docs/sweeps.md)."""

    def __init__(self, address: str | None = None, threads: int | None = None):
        self.ray = require("ray", "ray")
        if not self.ray.is_initialized():
            try:
                options = {"address": address} if address else {"include_dashboard": False}  # a new local cluster: no dashboard
                self.ray.init(log_to_driver=False, **options)
            except ConnectionError as exc:
                raise OffbenchError(f"--address {address}: cannot connect to a Ray cluster ({exc})") from None
        self.threads = threads or 1
        total = int(self.ray.cluster_resources().get("CPU", 1))
        self.slots = max(1, total // self.threads)
        self.task = self.ray.remote(num_cpus=self.threads, max_retries=0)(run_job)
        self.running: dict[object, str] = {}

    def start(self, job: Job) -> None:
        ref = self.task.remote(Job(job.name, job.argv, {**job.env, **thread_env(self.threads)}, job.log))
        self.running[ref] = job.name

    def wait(self, timeout: float) -> list[Outcome]:
        if not self.running:
            return []
        ready, _ = self.ray.wait(list(self.running), num_returns=len(self.running), timeout=timeout)
        outcomes = []
        for ref in ready:
            name = self.running.pop(ref)
            try:
                outcomes.append(self.ray.get(ref))
            except self.ray.exceptions.RayError as exc:  # the worker died (node lost, killed): the run did not finish
                outcomes.append(Outcome(name, 1, f"ray: {str(exc).strip().splitlines()[0][:300]}"))
        return outcomes

    def stop(self) -> None:
        for ref in self.running:
            self.ray.cancel(ref)  # KeyboardInterrupt in the task: it interrupts its run process and waits
        for ref in list(self.running):
            try:
                self.ray.get(ref, timeout=STOP_GRACE_S + 10)
            except Exception:  # noqa: BLE001 - cancelled or failed, either way it is stopped
                pass
        self.running.clear()

    def close(self) -> None:
        self.stop()


EXECUTORS = {"local": LocalExecutor, "ray": RayExecutor}


def make_executor(name: str, workers: int | None, threads: int | None, address: str | None) -> Executor:
    if name not in EXECUTORS:
        raise OffbenchError(f"--executor {name!r}: unknown (known: {', '.join(EXECUTORS)})")
    if name == "ray":
        if workers is not None:
            raise OffbenchError("--workers is for the local executor; Ray runs as many as the cluster's CPUs allow (see --threads)")
        return RayExecutor(address, threads)
    if address is not None:
        raise OffbenchError("--address is for --executor ray")
    return LocalExecutor(workers, threads)
