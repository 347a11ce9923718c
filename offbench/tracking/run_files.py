"""The records of a run directory's files (docs/run-directory.md): `RunRecord` (run.json) and `RunSummary`
(summary.json); an evaluations.jsonl line is `offbench.evaluation.results.EvaluationRecord`. The writers
(`offbench.tracking.run_dir`) build these classes and the readers (`offbench.tracking.read_run`) read them back,
so what is written is what is read.

Fields that are unknown when written (a script outside git, an environment without success, an unknown optimum)
are written as null rather than left out; fields that runs from earlier versions lack read as their defaults.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from offbench.evaluation.results import SCORE_METRICS, EvaluationRecord, EvaluationSettings, TaskScores
from offbench.records import Invalid, ranged, write_field_tables
from offbench.tracking.provenance import METHOD_KINDS

SCHEMA = 1
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
CHECKPOINT = Path("checkpoints") / "last.pt"
MAX_TEXT = 512  # characters of any one string copied from a run into a leaderboard entry
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def one_line(value: str, name: str) -> None:
    """`value` is a name a leaderboard can show: one line of 1-MAX_TEXT characters."""
    if not value or len(value) > MAX_TEXT or any(c in value for c in "\n\r"):
        raise Invalid(f"'{name}' must be one line of 1-{MAX_TEXT} characters")


@dataclass(kw_only=True)
class DatasetRecord:
    """run.json `dataset`: the data the run trained on."""

    id: str = ranged(doc="the dataset id (or the path of a file without a card)")
    path: str = ranged(doc="where the data was read from")
    content_sha256: str = ranged(doc="sha256 of the data's content (offbench.data.store), what leaderboards pin")
    format: str | None = ranged(None, doc="the on-disk format the data was read in")

    def check(self) -> None:
        if not self.id:
            raise Invalid("'id' must not be empty")
        if not _SHA256.match(self.content_sha256):
            raise Invalid(f"'content_sha256' must be a sha256 hex digest, got {self.content_sha256[:80]!r}")


@dataclass(kw_only=True)
class SourceRecord:
    """run.json `method.source`: where an own-code or black-box method's script comes from."""

    script: str | None = ranged(None, null=True, doc="the calling script, relative to its git repository where there is one")
    script_sha256: str | None = ranged(None, null=True, doc="sha256 of the script's bytes")
    repository: str | None = ranged(None, null=True, doc="the git remote's URL")
    git_commit: str | None = ranged(None, null=True, doc="the repository's commit")
    git_dirty: bool | None = ranged(None, null=True, doc="whether tracked files had changes")
    distribution: str | None = ranged(None, null=True, doc="the installed distribution providing the script's module (outside git)")
    version: str | None = ranged(None, null=True, doc="that distribution's version")


@dataclass(kw_only=True)
class LoaderRecord:
    """run.json `method.load`: the function that rebuilds an own-code policy from its checkpoint."""

    module: str = ranged(doc="its module (`__main__` for a script)")
    qualname: str = ranged(doc="its qualified name in the module")
    file: str | None = ranged(None, null=True, doc="the module's file")
    repository_file: str | None = ranged(None, null=True, doc="that file's path inside its git repository")


def _plugin(method: MethodRecord) -> bool:
    return method.kind == "plugin"


@dataclass(kw_only=True)
class MethodRecord:
    """run.json `method`: where the method's code comes from (offbench.tracking.provenance)."""

    kind: str = ranged(choices=METHOD_KINDS, doc="built-in, plugin, own-code (offbench.track) or black-box (offbench.evaluate)")
    name: str = ranged(doc="the method's name")
    distribution: str | None = ranged(None, null=_plugin, doc="plugin: the distribution registering it")
    version: str | None = ranged(None, null=_plugin, doc="plugin: that distribution's version")
    entry_point: str | None = ranged(None, doc="plugin: `package.module:Class`")
    source: SourceRecord | None = ranged(None, doc="own-code and black-box: where the calling script comes from")
    load: LoaderRecord | None = ranged(None, doc="own-code checkpointed with `load=`: the function that rebuilds the policy")

    def check(self) -> None:
        if self.kind == "plugin" and self.entry_point is None:
            raise Invalid("'entry_point' is needed for a plugin method")
        if self.kind in ("own-code", "black-box") and self.source is None:
            raise Invalid(f"'source' is needed for a {self.kind} method")
        if self.load is not None and self.kind != "own-code":
            raise Invalid(f"'load' is only for own-code methods, not {self.kind}")


@dataclass(kw_only=True)
class CodeVersion:
    """run.json `code`: the offbench that ran."""

    version: str = ranged(doc="offbench's version")
    git_commit: str | None = ranged(None, null=True, doc="the checkout's commit, when run from a git checkout")
    git_dirty: bool | None = ranged(None, null=True, doc="whether tracked files were changed")


@dataclass(kw_only=True)
class EnvironmentInfo:
    """run.json `env`: where the run ran. The SIMD kernels matter: AVX-512 and AVX2 machines differ in the last
    bits of some results, so runs compare bit for bit only where `numpy_simd`, `torch_cpu_capability` and `mkl_branch`
    agree."""

    python: str | None = ranged(None, doc="Python's version")
    torch: str | None = ranged(None, doc="torch's version")
    numpy: str | None = ranged(None, doc="NumPy's version")
    platform: str | None = ranged(None, doc="the operating system")
    cpu: str | None = ranged(None, doc="the CPU model")
    cpu_count: int | None = ranged(None, null=True, doc="logical CPUs")
    torch_threads: int | None = ranged(None, doc="torch's intra-op threads")
    numpy_simd: list[str] | None = ranged(None, doc="the SIMD kernels NumPy dispatches to")
    torch_cpu_capability: str | None = ranged(None, doc="the SIMD kernels torch dispatches to")
    mkl_branch: str | None = ranged(None, null=True, doc="MKL's code branch, which runs torch's matmuls (null without MKL)")
    device: str = ranged(doc="the torch device trained on")
    gpu: str | None = ranged(None, doc="the GPU's name, on CUDA")


@dataclass(kw_only=True)
class ResumeRecord:
    """One entry of run.json `resumes`."""

    at: str = ranged(doc="when the run was resumed (UTC ISO 8601)")
    from_step: int = ranged(ge=0, doc="the checkpoint's step it continued from")


@dataclass(kw_only=True)
class DistributedRecord:
    """run.json `distributed`: a data-parallel run's processes."""

    world_size: int = ranged(ge=1, doc="processes")
    backend: str = ranged(doc="torch.distributed backend (nccl or gloo)")


@dataclass(kw_only=True)
class RunRecord:
    """run.json: what a run is (written at its start, rewritten on resume)."""

    schema: Literal[1] = ranged(doc="the run directory format's version")
    run_id: str = ranged(doc="the run directory's name")
    baseline: str = ranged(doc="the baseline (or method) name")
    method: MethodRecord | None = ranged(None, doc="where the method comes from; runs from before it was recorded are built-in")
    dataset: DatasetRecord = ranged(doc="the data trained on")
    seed: int = ranged(ge=0, lt=2**32, doc="the run's seed (NumPy's global seed and the evaluation seeds need it below 2**32)")
    config: dict[str, Any] = ranged(doc="the resolved config: the training fields and the baseline's, one flat table")
    config_sources: list[str] = ranged(default_factory=list, doc="the config files and `--set` overrides applied, in order")
    code: CodeVersion = ranged(doc="the offbench that ran")
    env: EnvironmentInfo = ranged(doc="where it ran")
    evaluation: EvaluationSettings = ranged(doc="the evaluation protocol's settings")
    loggers: list[str] = ranged(default_factory=list, doc="extra logger back-ends")
    started_at: str | None = ranged(None, doc="when the run started (UTC ISO 8601)")
    resumes: list[ResumeRecord] | None = ranged(None, doc="one entry per resume")
    distributed: DistributedRecord | None = ranged(None, doc="a data-parallel run's processes")

    def check(self) -> None:
        one_line(self.run_id, "run_id")
        one_line(self.baseline, "baseline")
        config_seed = self.config.get("seed", self.seed)
        if config_seed != self.seed or isinstance(config_seed, bool):
            raise Invalid(f"'seed' {self.seed} differs from config.seed {config_seed!r}")
        config_episodes = self.config.get("eval_episodes", self.evaluation.episodes)
        if config_episodes != self.evaluation.episodes:
            raise Invalid(f"'evaluation.episodes' {self.evaluation.episodes} differs from config.eval_episodes {config_episodes!r}")

    @property
    def method_kind(self) -> str:
        return self.method.kind if self.method is not None else "built-in"


@dataclass(kw_only=True)
class SummaryEntry:
    """summary.json `final` or `best`: the headline numbers of one evaluation line."""

    step: int = ranged(ge=0, doc="the evaluation's step")
    mean_return: float = ranged(doc="its mean return")
    normalized_score: float | None = ranged(None, null=True, doc="its normalised score, where the card has reference scores")
    success_rate: float | None = ranged(None, null=True, doc="its success rate, where the environment reports success")
    target_return: float | None = ranged(None, null=True, doc="the target return it was conditioned on")
    regret: float | None = ranged(None, doc="in-context runs: its cumulative regret")


@dataclass(kw_only=True)
class RunSummary:
    """summary.json: a finished run's result (written at its end)."""

    status: str = ranged(doc='"completed"')
    steps: int = ranged(ge=0, doc="training steps")
    wall_time_s: float = ranged(ge=0, doc="wall time, resumes and evaluations included")
    final: SummaryEntry | None = ranged(null=True, doc="the last evaluation at the headline target (what tables use); null without one")
    best: SummaryEntry | None = ranged(
        null=True, doc="the evaluation with the best `score_metric` (highest; lowest for regret; earliest on ties)"
    )
    score_metric: str = ranged(choices=SCORE_METRICS, doc="the headline field")
    finished_at: str | None = ranged(None, doc="when the run finished (UTC ISO 8601)")


DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "run-directory.md"
RUN_DIRECTORY_RECORDS = (
    RunRecord,
    DatasetRecord,
    MethodRecord,
    SourceRecord,
    LoaderRecord,
    CodeVersion,
    EnvironmentInfo,
    EvaluationSettings,
    ResumeRecord,
    DistributedRecord,
    EvaluationRecord,
    TaskScores,
    RunSummary,
    SummaryEntry,
)  # documented in docs/run-directory.md


def write_field_docs(page: Path = DOCS_PAGE) -> Path:
    """Regenerate the field tables of docs/run-directory.md from the records' `doc=`s (tests/test_run_files.py
    fails while they differ)."""
    return write_field_tables(page, *RUN_DIRECTORY_RECORDS)
