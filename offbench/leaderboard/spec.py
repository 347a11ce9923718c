"""Benchmark definitions: `leaderboards/<name>/benchmark.toml` says which runs a leaderboard may show.

    title = "Pendulum, scripted controller data"
    description = "..."
    datasets = ["pendulum-scripted"]      # dataset ids (cards); one table column each
    metric = "normalized_score"           # normalized_score | success_rate | mean_return | in_context_return | regret
    score = "final"                       # final (default) | best; a table never mixes the two
    min_seeds = 3                         # seeds a submission must bring for one baseline and dataset
    bootstrap_reps = 2000                 # stratified-bootstrap replications for every interval (optional)
    [evaluation]                          # the protocol; every key given must equal the run's run.json
    episodes = 10                         # evaluation episodes per evaluation (optional)
    every_steps = 1000                    # schedule (optional)
    steps = 5000                          # training updates, summary.json `steps` (optional)
    target_returns = [6000.0, 12000.0]    # return-conditioned runs (DT) must use exactly these (optional)
    in_context_episodes = 20              # in-context benchmarks only
    [evaluation.dataset."bandit-long"]    # optional: what differs for one dataset (e.g. its histories' length)
    in_context_episodes = 500
    [evaluation.baseline.dt]              # optional: what differs for one baseline (its source's protocol)
    episodes = 100
    [dataset_checksums]                   # optional pins of each dataset's content sha256
    "pendulum-scripted" = "..."
    [dataset_made_on."pendulum-scripted"] # optional, generated data: the SIMD kernels the pinned copy was made on
    torch_cpu_capability = "AVX512"       # (its card's made_on; `offbench download` warns where this machine's differ)
    numpy_simd = ["X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"]
    mkl_branch = "AVX2"                   # optional: MKL's code branch there (torch's matmuls; `offbench info` shows it)
    [behaviour]                           # optional: the data's own score (its behaviour policy's), a marked row
    "pendulum-scripted" = 77.43           # never ranked; `offbench leaderboard behaviour NAME` prints it from the data
    [[reported]]                          # published numbers shown beside ours, marked, never in our statistics
    label = "CQL"
    source = { paper = "...", table = "...", version = "...", url = "https://..." }   # url optional
    note = "..."                          # optional: what differs from our protocol
    scores = { "pendulum-scripted" = { mean = 47.0, std = 0.2 } }   # std optional; in the benchmark metric's units

The file is read through the `BenchmarkFile` record (every key, type and rule in one place, and the field table
in docs/leaderboards.md generated from it); `load_spec` resolves it into the `BenchmarkSpec` the rest of
offbench uses.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from offbench.errors import OffbenchError
from offbench.paths import builtin_dir
from offbench.records import Invalid, ranged, read_toml, to_dict
from offbench.stats import BOOTSTRAP_REPS, METRICS, Metric

REPORTED_TEXT = 300  # characters of any one field of a reported row's source or note
REPORTED_LABEL = 64  # characters of a reported row's label
SCORE_KINDS = ("final", "best")
PROTOCOL_KEYS = ("episodes", "every_steps", "steps", "target_returns", "in_context_episodes")
PER_KEYS = ("dataset", "baseline")  # [evaluation] tables that differ for one dataset or one baseline
IN_CONTEXT_METRICS = ("in_context_return", "regret")  # scored from in-context episodes, whose number the protocol must fix
BEHAVIOUR_METRICS = ("success_rate", "normalized_score")  # metrics a dataset's own episodes have a score in
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def one_line(value: str, what: str, limit: int = REPORTED_TEXT) -> None:
    """Invalid unless `value` is one line of 1-`limit` characters: reported text lands in table cells and captions."""
    if not value.strip() or len(value) > limit or any(c in value for c in "\n\r"):
        raise Invalid(f"'{what}' must be one line of 1-{limit} characters, got {value!r:.80}")


# ------------------------------------------------------------------------------ benchmark.toml, as written
@dataclass(frozen=True)
class Protocol:
    """What a run's evaluation must be: every key given must equal the run's (run.json `evaluation`, summary `steps`)."""

    episodes: int | None = ranged(None, ge=1, doc="evaluation episodes per evaluation (per task on a multi-task suite)")
    every_steps: int | None = ranged(None, ge=1, doc="training updates between evaluations")
    steps: int | None = ranged(None, ge=1, doc="training updates (summary.json `steps`)")
    target_returns: list[float] | None = ranged(
        None, doc="the target returns a return-conditioned run (DT) must use, all of them; other runs have none"
    )
    in_context_episodes: int | None = ranged(None, ge=1, doc="in-context episodes per evaluation (needed by the in-context metrics)")


@dataclass(frozen=True)
class Evaluation(Protocol):
    """`[evaluation]`: the benchmark's protocol; under `[evaluation.dataset."ID"]` what differs for one dataset, and
    under `[evaluation.baseline.NAME]` what differs for one baseline (that order: a baseline's keys win)."""

    dataset: dict[str, Protocol] | None = ranged(
        None,
        doc='`[evaluation.dataset."ID"]`: the protocol keys that differ for dataset ID (e.g. its histories\' length); datasets of the benchmark only',
    )
    baseline: dict[str, Protocol] | None = ranged(
        None, doc="`[evaluation.baseline.NAME]`: the protocol keys that differ for baseline NAME (its source's protocol)"
    )

    def check(self) -> None:
        if not to_dict(self):
            raise Invalid(f"must give the protocol (any of {', '.join(PROTOCOL_KEYS)})")


@dataclass(frozen=True)
class ReportedSource:
    """Where a reported row's numbers come from."""

    paper: str = ranged(doc="the publication")
    table: str = ranged(doc="the table or figure the numbers are read from")
    version: str = ranged(doc="the paper's or code's version (arXiv version, commit)")
    url: str | None = ranged(None, doc="a https:// link to it")

    def check(self) -> None:
        for key, value in to_dict(self).items():
            one_line(value, key)
        if self.url is not None and not self.url.startswith("https://"):
            raise Invalid("'url' must start with https://")


@dataclass(frozen=True)
class ReportedScore:
    mean: float = ranged(doc="the published mean, in the benchmark metric's units")
    std: float | None = ranged(None, ge=0, doc="the published spread, as published")


@dataclass(frozen=True)
class Reported:
    """`[[reported]]`: published numbers shown beside ours, marked as reported, never in our statistics."""

    label: str = ranged(doc=f"the row's name (one line, at most {REPORTED_LABEL} characters)")
    source: ReportedSource = ranged(doc="`{ paper, table, version, url }`: where the numbers come from (url optional)")
    scores: dict[str, ReportedScore] = ranged(doc="dataset id -> `{ mean, std }` (std optional); datasets of the benchmark only")
    note: str | None = ranged(None, doc="what differs from our protocol")

    def check(self) -> None:
        one_line(self.label, "label", REPORTED_LABEL)
        if self.note is not None:
            one_line(self.note, "note")
        if not self.scores:
            raise Invalid("'scores' must map dataset ids to { mean = ..., std = ... }")


@dataclass(frozen=True, kw_only=True)
class MadeOn:
    """`[dataset_made_on."ID"]`: the SIMD kernels the pinned copy of a generated dataset was made on (its card's
    `made_on`). A generator that trains (SAC) or draws through NumPy's sin/cos makes other bits on other kernels."""

    torch_cpu_capability: str = ranged(doc="torch's SIMD kernels there (`torch.backends.cpu.get_cpu_capability()`)")
    numpy_simd: list[str] = ranged(doc="the SIMD kernels NumPy dispatched to there")
    mkl_branch: str | None = ranged(
        None, doc="MKL's code branch there, which runs torch's matmuls (an Intel instruction set, AUTO on other CPUs, or CNR <branch>)"
    )
    cpu: str | None = ranged(None, doc="the CPU model, for the reader")


@dataclass(frozen=True, kw_only=True)
class BenchmarkFile:
    """`leaderboards/<name>/benchmark.toml`: which runs a leaderboard may show, and how they are scored."""

    title: str | None = ranged(None, doc="the board's title (default: its folder name)")
    description: str = ranged("", doc="what the board measures and how (Markdown, shown above its tables)")
    datasets: tuple[str, ...] = ranged(doc="dataset ids (cards), one table column each, each once")
    metric: str = ranged(choices=tuple(METRICS), doc="what every cell scores; regret is lower-is-better")
    score: str = ranged("final", choices=SCORE_KINDS, doc="each run's final evaluation, or its best; a table never mixes the two")
    min_seeds: int = ranged(3, ge=1, doc="seeds a submission must bring for one baseline and dataset")
    bootstrap_reps: int = ranged(BOOTSTRAP_REPS, ge=100, doc="bootstrap resamples for every interval")
    evaluation: Evaluation = ranged(doc="`[evaluation]`: the protocol every run must follow (table below)")
    dataset_checksums: dict[str, str] = ranged(
        default_factory=dict, doc="`[dataset_checksums]`: dataset id -> the content sha256 (64 lowercase hex) its entries were made from"
    )
    dataset_made_on: dict[str, MadeOn] = ranged(
        default_factory=dict,
        doc='`[dataset_made_on."ID"]`: for a pinned generated dataset, the SIMD kernels its pinned copy was made on '
        "(table below); `offbench download` generates on them where this machine can reach them, warns where it cannot, "
        "and a refused checksum names them",
    )
    reported: tuple[Reported, ...] = ranged(default_factory=tuple, doc="`[[reported]]`: published rows shown beside ours (table below)")
    behaviour: dict[str, float] = ranged(
        default_factory=dict,
        doc="`[behaviour]`: dataset id -> the data's own score in the board's metric (its behaviour policy's: mean over tasks "
        "of the fraction of each task's episodes that succeed, or the normalised mean episode return), shown as a marked row, "
        "never ranked; datasets of the benchmark only, metrics success_rate and normalized_score only; "
        "`offbench leaderboard behaviour NAME` prints it from the data, `check` compares",
    )

    def check(self) -> None:
        if not self.datasets or not all(self.datasets):
            raise Invalid("'datasets' must be a non-empty list of dataset ids")
        if len(set(self.datasets)) != len(self.datasets):
            raise Invalid("'datasets' lists a dataset twice")
        per_dataset = self.evaluation.dataset or {}
        unset = [
            d
            for d in self.datasets
            if self.evaluation.in_context_episodes is None and (d not in per_dataset or per_dataset[d].in_context_episodes is None)
        ]
        if self.metric in IN_CONTEXT_METRICS and unset:
            raise Invalid(f"metric '{self.metric}' needs evaluation.in_context_episodes (for dataset '{unset[0]}')")
        outside = [d for d in (self.evaluation.dataset or {}) if d not in self.datasets]
        if outside:
            raise Invalid(f"'evaluation.dataset' names '{outside[0]}', which is not in 'datasets'")
        self._check_checksums()
        self._check_reported()
        self._check_behaviour()

    def _check_checksums(self) -> None:
        for dataset_id, sha in self.dataset_checksums.items():
            if dataset_id not in self.datasets:
                raise Invalid(f"'dataset_checksums' names '{dataset_id}', which is not in 'datasets'")
            if not SHA256.match(sha):
                raise Invalid(f"'dataset_checksums.{dataset_id}' must be 64 lowercase hex characters")
        for dataset_id in self.dataset_made_on:
            if dataset_id not in self.dataset_checksums:
                raise Invalid(f"'dataset_made_on' names '{dataset_id}', which has no pin in 'dataset_checksums'")

    def _check_reported(self) -> None:
        labels = [row.label for row in self.reported]
        if len(set(labels)) != len(labels):
            raise Invalid("'reported' names a label twice")
        for index, row in enumerate(self.reported):
            for dataset_id in row.scores:
                if dataset_id not in self.datasets:
                    raise Invalid(f"'reported[{index}].scores' names '{dataset_id}', which is not one of the benchmark's datasets")

    def _check_behaviour(self) -> None:
        if self.behaviour and self.metric not in BEHAVIOUR_METRICS:
            raise Invalid(f"'behaviour' needs metric {' or '.join(BEHAVIOUR_METRICS)}: the data has no '{self.metric}' score")
        for dataset_id, value in self.behaviour.items():
            if dataset_id not in self.datasets:
                raise Invalid(f"'behaviour' names '{dataset_id}', which is not in 'datasets'")
            if self.metric == "success_rate" and not 0 <= value <= 1:
                raise Invalid(f"'behaviour.{dataset_id}' must be a success rate between 0 and 1, got {value:g}")

    def resolve(self, name: str, path: Path | None) -> BenchmarkSpec:
        """The benchmark as the rest of offbench uses it: its name and folder, the metric's definition."""
        return BenchmarkSpec(
            name=name,
            title=name if self.title is None else self.title,
            description=self.description.strip(),
            datasets=self.datasets,
            metric=METRICS[self.metric],
            score=self.score,
            min_seeds=self.min_seeds,
            protocol=to_dict(self.evaluation),
            dataset_checksums=dict(self.dataset_checksums),
            dataset_made_on={dataset_id: to_dict(made) for dataset_id, made in self.dataset_made_on.items()},
            bootstrap_reps=self.bootstrap_reps,
            reported=tuple(
                ReportedRow(
                    label=row.label,
                    source=to_dict(row.source),
                    note=row.note or "",
                    scores={d: (score.mean, score.std) for d, score in row.scores.items()},
                )
                for row in self.reported
            ),
            behaviour=dict(self.behaviour),
            path=path,
        )


# ------------------------------------------------------------------------------ the benchmark, resolved
@dataclass(frozen=True)
class ReportedRow:
    """Published numbers (not our runs): shown in the tables, marked as reported, never in our statistics."""

    label: str
    source: dict[str, str]  # paper, table, version; url optional
    scores: dict[str, tuple[float, float | None]]  # dataset -> (mean, spread as published, or None)
    note: str = ""


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    title: str
    description: str
    datasets: tuple[str, ...]
    metric: Metric
    score: str
    min_seeds: int
    protocol: dict[str, Any]
    dataset_checksums: dict[str, str] = field(default_factory=dict)
    dataset_made_on: dict[str, dict[str, Any]] = field(default_factory=dict)  # dataset -> `[dataset_made_on]` kernels
    bootstrap_reps: int = BOOTSTRAP_REPS
    reported: tuple[ReportedRow, ...] = ()
    behaviour: dict[str, float] = field(default_factory=dict)  # dataset -> the data's own score (`[behaviour]`)
    path: Path | None = None

    @property
    def folder(self) -> Path:
        assert self.path is not None
        return self.path.parent

    @property
    def entries_dir(self) -> Path:
        return self.folder / "entries"

    @property
    def lock(self) -> FileLock:
        """The one lock that submissions and re-renders of this benchmark take, so none interleave."""
        return FileLock(str(self.folder / ".submit.lock"))

    def made_on_note(self, dataset: str) -> str:
        """'; the pinned copy was generated where ...' for a dataset whose pinned copy's kernels the board states (for
        messages about a copy that differs from the pin), else ''."""
        made = self.dataset_made_on.get(dataset)
        if made is None:
            return ""
        mkl = f", mkl_branch {made['mkl_branch']}" if made.get("mkl_branch") else ""
        return (
            f"; the pinned copy was generated where torch_cpu_capability is {made['torch_cpu_capability']} and numpy_simd "
            f"{made['numpy_simd']}{mkl}, and a copy generated on other SIMD kernels differs in its bits"
        )

    def protocol_for(self, baseline: str, dataset: str) -> dict[str, Any]:
        """The protocol a run of `baseline` on `dataset` must follow: the benchmark's, with the dataset's own keys over
        it, then the baseline's."""
        board = {k: v for k, v in self.protocol.items() if k not in PER_KEYS}
        return {**board, **self.protocol.get("dataset", {}).get(dataset, {}), **self.protocol.get("baseline", {}).get(baseline, {})}

    def dataset_note(self, dataset: str) -> str:
        """' on DATASET' where the dataset has protocol keys of its own (for messages), else ''."""
        return f" on {dataset}" if dataset in self.protocol.get("dataset", {}) else ""

    @property
    def score_label(self) -> str:
        """What every cell holds, e.g. 'final normalised score (0 = random, 100 = expert reference)'."""
        return f"{self.score} {self.metric.label}"


def without_pins(board: dict[str, Any]) -> dict[str, Any]:
    """A benchmark.toml's table without its pinned data (`[dataset_checksums]` and the `[dataset_made_on]` that
    describes them): a private copy of a board that checks runs against this machine's copy of the data."""
    return {key: value for key, value in board.items() if key not in ("dataset_checksums", "dataset_made_on")}


def leaderboards_root(root: str | Path | None = None) -> Path:
    """Folder holding one sub-folder per benchmark: --root, else $OFFBENCH_LEADERBOARDS, else the checkout's."""
    if root is not None:
        return Path(root)
    if os.environ.get("OFFBENCH_LEADERBOARDS"):
        return Path(os.environ["OFFBENCH_LEADERBOARDS"])
    return builtin_dir("leaderboards")


def known_benchmarks(root: str | Path | None = None) -> list[str]:
    folder = leaderboards_root(root)
    return sorted(p.parent.name for p in folder.glob("*/benchmark.toml")) if folder.is_dir() else []


def load_spec(name: str, root: str | Path | None = None) -> BenchmarkSpec:
    """The benchmark called `name`; an unknown name is a one-line error listing the known ones, a bad file one line
    naming the file and the key."""
    folder = leaderboards_root(root)
    path = folder / name / "benchmark.toml"
    if not _NAME.match(name) or not path.is_file():
        known = ", ".join(known_benchmarks(root)) or "none"
        raise OffbenchError(f"unknown benchmark '{name}' in {folder} (known: {known})")
    return read_toml(path, BenchmarkFile, "benchmark definition").resolve(name, path)


def pinned_kernels(dataset_id: str, root: str | Path | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(benchmark, kernels) for every benchmark that pins the SIMD kernels its copy of `dataset_id` was made on
    (`[dataset_made_on]`). A benchmark that cannot be read is passed over (`leaderboard check` reports it)."""
    pins = []
    for name in known_benchmarks(root):
        try:
            made = load_spec(name, root).dataset_made_on.get(dataset_id)
        except OffbenchError:
            continue
        if made is not None:
            pins.append((name, made))
    return pins


def made_elsewhere(dataset_id: str, root: str | Path | None = None) -> list[str]:
    """One line per benchmark whose pinned copy of `dataset_id` was made on other SIMD kernels than this machine's:
    a copy generated here will differ in its bits, and that board refuses runs on it. Said before a generation that
    may take hours."""
    from offbench.machine import kernel_difference

    lines = []
    for name, made in pinned_kernels(dataset_id, root):
        difference = kernel_difference(made)
        if difference is not None:
            lines.append(
                f"leaderboard '{name}' pins {dataset_id} as made on other SIMD kernels ({difference}): "
                "the copy made here will differ in its bits, and that board will refuse runs on it"
            )
    return lines
