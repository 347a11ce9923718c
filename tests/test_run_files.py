"""A run directory's files read through their records (offbench/tracking/run_files.py, evaluation/results.py): a bad
field of run.json, summary.json or an evaluation line is one line naming the file and the dotted field; what the
writers write reads back the same; docs/run-directory.md's field tables are the records'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_dirs import write_run

from offbench.errors import OffbenchError
from offbench.evaluation.results import EvaluationRecord
from offbench.records import fill_field_tables, from_dict, to_dict
from offbench.tracking.read_run import Refused, read_run, read_run_record
from offbench.tracking.run_dir import write_run_json
from offbench.tracking.run_files import DOCS_PAGE, RUN_DIRECTORY_RECORDS, RunRecord

CHECKSUM = "ab" * 32


@pytest.fixture
def run(tmp_path) -> Path:
    return write_run(tmp_path / "runs", "bc", "test/a", CHECKSUM, seed=0, curve=[10.0, 20.0, 30.0])


def edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def edit_line(path: Path, number: int, edit) -> None:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    edit(lines[number - 1])
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda r: r["dataset"].update(content_sha256="abc"), "run.json: 'dataset.content_sha256' must be a sha256 hex digest, got 'abc'"),
        (lambda r: r["evaluation"].update(episodes="ten"), "run.json: 'evaluation.episodes' must be an integer, got 'ten'"),
        (lambda r: r["env"].pop("device"), "run.json: missing required key 'env.device'"),
        (lambda r: r.update(method={"kind": "plugin", "name": "x"}), "run.json: 'method.entry_point' is needed for a plugin method"),
        (lambda r: r.update(seed=3), "run.json: 'seed' 3 differs from config.seed 0"),
    ],
)
def test_a_bad_run_json_field_is_one_line_naming_the_file_and_dotted_field(run, edit, message):
    edit_json(run / "run.json", edit)
    with pytest.raises(Refused) as caught:
        read_run(run)
    assert str(caught.value) == f"{run}: refused (schema): {message}"
    with pytest.raises(OffbenchError) as reopened:  # what --resume and `offbench evaluate` read: the same rule, the full path
        read_run_record(run)
    assert str(reopened.value) == f"{run / 'run.json'}: {message.removeprefix('run.json: ')}"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s["final"].update(step=-1), "summary.json: 'final.step' must be at least 0, got -1"),
        (
            lambda s: s.update(score_metric="speed"),
            "summary.json: 'score_metric' must be one of normalized_score, success_rate, mean_return, regret, got 'speed'",
        ),
        (lambda s: s["best"].update(note="x"), "summary.json: 'best.note' is not a known key"),
    ],
)
def test_a_bad_summary_field_is_one_line_naming_the_file_and_dotted_field(run, edit, message):
    edit_json(run / "summary.json", edit)
    with pytest.raises(Refused) as caught:
        read_run(run)
    assert str(caught.value).startswith(f"{run}: refused (schema): {message}") and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "edit, rule, message",
    [
        (lambda line: line.update(lengths=["x"] * 5), "schema", "evaluations.jsonl line 2: 'lengths[0]' must be an integer, got 'x'"),
        (lambda line: line.pop("mean_return"), "schema", "evaluations.jsonl line 2: missing required key 'mean_return'"),
        (
            lambda line: line["returns"].__setitem__(3, float("inf")),
            "metric-finite",
            "evaluations.jsonl line 2: 'returns[3]' is not a finite number",
        ),
    ],
)
def test_a_bad_evaluation_line_is_one_line_naming_the_line_and_dotted_field(run, edit, rule, message):
    edit_line(run / "evaluations.jsonl", 2, edit)
    with pytest.raises(Refused) as caught:
        read_run(run)
    assert str(caught.value) == f"{run}: refused ({rule}): {message}"


def test_a_run_json_table_that_would_not_read_back_is_never_written(run):
    before = (run / "run.json").read_text()
    fields = {key: value for key, value in json.loads(before).items() if key != "schema"}
    with pytest.raises(OffbenchError, match=r"run\.json: 'seed' must be at least 0 and less than 4294967296, got -1"):
        write_run_json(run, {**fields, "seed": -1, "config": {}})  # a run being trained holds run.json as a table
    assert (run / "run.json").read_text() == before
    written = from_dict(RunRecord, json.loads(before), "run.json")
    write_run_json(run, written)
    assert read_run_record(run) == written  # what is read is what was written


def test_evaluation_lines_write_null_for_measured_fields_and_leave_out_other_protocols_fields():
    single = EvaluationRecord(step=1, returns=[1.0], lengths=[3], mean_return=1.0)
    assert set(to_dict(single)) == {"step", "returns", "lengths", "mean_return", "normalized_score", "success_rate", "target_return"}
    unknown_optimum = EvaluationRecord(step=1, returns=[1.0], lengths=[3], mean_return=1.0, in_context_returns=[1.0], tasks="held-out")
    line = to_dict(unknown_optimum)
    assert line["optimal_return"] is None and line["regret"] is None and line["in_context_regret"] is None and "per_task" not in line
    assert from_dict(EvaluationRecord, line, "evaluations.jsonl line 1") == unknown_optimum


def test_a_run_from_before_method_and_protocol_were_recorded_reads_as_built_in_single_task(run):
    record = read_run_record(run)
    assert record.method is None and record.method_kind == "built-in" and record.evaluation.protocol_name == "single-task"
    assert isinstance(from_dict(RunRecord, to_dict(record), "run.json"), RunRecord)


def test_the_field_tables_in_docs_are_the_records():
    page = DOCS_PAGE.read_text()
    assert fill_field_tables(page, *RUN_DIRECTORY_RECORDS) == page, "run offbench.tracking.run_files.write_field_docs()"
