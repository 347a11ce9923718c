"""Where generated data were made: the card records the machine's SIMD kernels (`made_on`), `offbench info` prints
them, and a board that pins a generated dataset's copy says on which kernels it was made, so `offbench download`
warns before hours of generation that cannot give the pinned bytes, and a refused checksum says why it may differ."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from run_dirs import write_benchmark

from offbench.data.store import load_native
from offbench.errors import OffbenchError
from offbench.leaderboard.entries import EntryDataset, _check_checksum
from offbench.leaderboard.spec import load_spec, made_elsewhere
from offbench.machine import kernel_variables, made_on

PINNED = "ab" * 32


def other_kernels() -> dict:
    """IBM Z's kernels: other than any test machine's, and out of its reach (no variable lowers an x86 CPU to them)."""
    return {"torch_cpu_capability": "ZVECTOR", "numpy_simd": ["VX", "VXE"]}


def pin(root, name: str, kernels: dict) -> None:
    write_benchmark(
        root,
        name,
        ["pendulum-scripted"],
        dataset_checksums={"pendulum-scripted": PINNED},
        dataset_made_on={"pendulum-scripted": {**kernels, "cpu": "a test CPU"}},
    )


def test_download_warns_where_a_board_pinned_a_copy_made_on_other_kernels_and_the_card_records_these(
    run_cli, isolated_home, tmp_path, monkeypatch
):
    root = tmp_path / "leaderboards"
    monkeypatch.setenv("OFFBENCH_LEADERBOARDS", str(root))
    here = made_on()
    pin(root, "elsewhere", other_kernels())
    pin(root, "here", {key: here[key] for key in ("torch_cpu_capability", "numpy_simd")})

    proc = run_cli("download", "pendulum-scripted", check=True)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("offbench: warning:")]
    assert len(warnings) == 1, proc.stderr
    assert "leaderboard 'elsewhere' pins pendulum-scripted as made on other SIMD kernels" in warnings[0]
    assert f"torch_cpu_capability: {other_kernels()['torch_cpu_capability']} there, {here['torch_cpu_capability']} here" in warnings[0]

    assert load_native(isolated_home / "data" / "pendulum-scripted" / "data.h5").card["made_on"] == here
    info = run_cli("info", "pendulum-scripted", check=True).stdout
    assert f"torch {here['torch_cpu_capability']} kernels" in info and here["cpu"] in info
    assert here["mkl_branch"] is None or f"MKL {here['mkl_branch']}" in " ".join(info.split())  # the table may wrap


AVX512_AMD = {"torch_cpu_capability": "AVX512", "numpy_simd": ["X86_V3", "X86_V4", "AVX512_ICL"], "mkl_branch": "AUTO"}
AVX2_AMD = {"torch_cpu_capability": "AVX2", "numpy_simd": ["X86_V3"], "mkl_branch": "AUTO"}


@pytest.mark.parametrize(
    "here, there, variables",
    [
        (
            AVX512_AMD,
            AVX2_AMD,
            {"ATEN_CPU_CAPABILITY": "avx2", "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL", "OPENBLAS_CORETYPE": "Haswell"},
        ),
        (AVX512_AMD, {**AVX512_AMD, "cpu": "another"}, {}),
        (
            AVX2_AMD,
            {"torch_cpu_capability": "DEFAULT", "numpy_simd": []},
            {"ATEN_CPU_CAPABILITY": "default", "NPY_DISABLE_CPU_FEATURES": "X86_V3"},
        ),
        (AVX512_AMD, {**AVX512_AMD, "mkl_branch": "CNR COMPATIBLE"}, {"MKL_CBWR": "COMPATIBLE"}),
        (AVX2_AMD, AVX512_AMD, None),  # kernels this CPU lacks
        (AVX512_AMD, {**AVX2_AMD, "numpy_simd": ["X86_V3", "AVX512_SPR"]}, None),
        (AVX512_AMD, {**AVX2_AMD, "mkl_branch": "AVX2"}, None),  # an Intel CPU's own MKL branch: MKL picks it, no variable does
        (AVX512_AMD, {"torch_cpu_capability": "ZVECTOR"}, None),
    ],
)
def test_kernel_variables_lower_this_machine_to_kernels_it_has_and_to_no_others(here, there, variables):
    assert kernel_variables(there, here) == variables


@pytest.mark.skipif(made_on()["torch_cpu_capability"] not in ("AVX2", "AVX512"), reason="lowering to torch's DEFAULT kernels is x86's")
def test_download_generates_on_the_kernels_a_board_pins_where_this_machine_reaches_them(run_cli, isolated_home, tmp_path, monkeypatch):
    """An x86 machine can always reach torch's DEFAULT kernels and NumPy without SIMD dispatch: the copy is made on
    them in a child process, records them, and holds the bytes a process started by hand with those variables makes."""
    here = made_on()
    lowered = {"torch_cpu_capability": "DEFAULT", "numpy_simd": [], "mkl_branch": here["mkl_branch"]}
    root = tmp_path / "leaderboards"
    monkeypatch.setenv("OFFBENCH_LEADERBOARDS", str(root))
    pin(root, "lowered", lowered)

    proc = run_cli("download", "pendulum-scripted", check=True)
    assert (
        "offbench: generating pendulum-scripted on the SIMD kernels leaderboard 'lowered' pins for it (ATEN_CPU_CAPABILITY=default"
        in proc.stderr
    )
    assert "warning" not in proc.stderr, proc.stderr
    made = load_native(isolated_home / "data" / "pendulum-scripted" / "data.h5")
    assert {key: made.card["made_on"][key] for key in lowered} == lowered

    monkeypatch.setenv("OFFBENCH_LEADERBOARDS", str(tmp_path / "no-boards"))
    monkeypatch.setenv("OFFBENCH_HOME", str(tmp_path / "by-hand"))
    for name, value in kernel_variables(lowered).items():
        monkeypatch.setenv(name, value)
    run_cli("download", "pendulum-scripted", check=True)
    by_hand = load_native(tmp_path / "by-hand" / "data" / "pendulum-scripted" / "data.h5")
    assert by_hand.card["made_on"] == made.card["made_on"] and by_hand.content_sha256() == made.content_sha256()


def test_generate_records_the_machine_in_the_card_it_writes(run_cli, isolated_home, tmp_path):
    run_cli("generate", "bandit", "--tasks", "3", "--episodes", "10", "-q", "--out", tmp_path, check=True)
    assert load_native(tmp_path / "data.h5").card["made_on"] == made_on()


def test_a_refused_checksum_names_the_kernels_the_pinned_copy_was_made_on(tmp_path):
    pin(tmp_path, "tb", other_kernels())
    spec = load_spec("tb", tmp_path)

    def refuse(rule: str, message: str) -> OffbenchError:
        return OffbenchError(f"{rule}: {message}")

    with pytest.raises(OffbenchError) as refused:
        _check_checksum(spec, EntryDataset(id="pendulum-scripted", content_sha256="cd" * 32), refuse)
    message = str(refused.value)
    assert message.startswith("dataset-checksum: dataset 'pendulum-scripted' content sha256 cdcdcdcdcdcd... differs from abababababab...")
    assert f"generated where torch_cpu_capability is {other_kernels()['torch_cpu_capability']}" in message
    _check_checksum(spec, EntryDataset(id="pendulum-scripted", content_sha256=PINNED), refuse)  # the pinned bytes pass


def mkl_branch_in_subprocess(**variables: str) -> str:
    code = "from offbench.machine import mkl_branch; print(mkl_branch())"
    env = {key: value for key, value in os.environ.items() if key != "MKL_CBWR"}
    return subprocess.run([sys.executable, "-c", code], env={**env, **variables}, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(not torch.backends.mkl.is_available() or sys.platform != "linux", reason="MKL's branch is read from Linux torch wheels")
def test_mkl_branch_is_the_one_mkl_dispatches_to_or_the_one_mkl_cbwr_fixes():
    own = mkl_branch_in_subprocess()  # this CPU's own branch: AUTO on AMD's, an instruction set on Intel's
    assert own != "None" and not own.startswith("CNR"), own
    assert mkl_branch_in_subprocess(MKL_CBWR="COMPATIBLE") == "CNR COMPATIBLE"


def test_a_pin_made_on_another_mkl_branch_is_made_elsewhere_and_one_without_it_is_judged_by_the_rest(tmp_path):
    here = made_on()
    same_simd = {key: here[key] for key in ("torch_cpu_capability", "numpy_simd")}
    pin(tmp_path, "other-mkl", {**same_simd, "mkl_branch": "CNR SSE2"})
    pin(tmp_path, "no-mkl-stated", same_simd)
    lines = made_elsewhere("pendulum-scripted", tmp_path)
    assert lines == [
        f"leaderboard 'other-mkl' pins pendulum-scripted as made on other SIMD kernels (mkl_branch: CNR SSE2 there, "
        f"{here['mkl_branch']} here): the copy made here will differ in its bits, and that board will refuse runs on it"
    ]
    assert "mkl_branch CNR SSE2" in load_spec("other-mkl", tmp_path).made_on_note("pendulum-scripted")


def test_a_failure_in_the_child_is_this_process_s_one_line_error(isolated_home, tmp_path):
    from offbench.data.cards import get_card
    from offbench.generators.pinned_kernels import generate_in_child

    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not a folder")
    with pytest.raises(OffbenchError) as failed:
        generate_in_child(get_card("pendulum-scripted"), in_the_way / "data.h5", True, {})
    assert str(failed.value) == f"cannot make folder {in_the_way}: {in_the_way} is not a folder"


TINY_RUN = ["--steps", "20", "--set", "eval_every=10", "--set", "eval_episodes=2", "--set", "log_every=10", "--set", "checkpoint_every=20"]


@pytest.mark.skipif(made_on()["torch_cpu_capability"] not in ("AVX2", "AVX512"), reason="lowering to torch's DEFAULT kernels is x86's")
def test_a_run_made_on_kernels_this_machine_reaches_is_replayed_on_them_and_verified(run_cli, isolated_home, tmp_path, monkeypatch):
    """A run trained on torch's DEFAULT kernels without NumPy's SIMD dispatch is replayed in a child lowered to them,
    so verification holds it to exact equality rather than leaving it unverified as replayed on other kernels."""
    import offbench.utils
    from offbench.leaderboard.verify import verify_run
    from offbench.tracking.read_run import read_run

    lowered = kernel_variables({"torch_cpu_capability": "DEFAULT", "numpy_simd": []})
    assert lowered
    run_cli("download", "pendulum-scripted", check=True)
    for name, value in lowered.items():
        monkeypatch.setenv(name, value)
    run_cli("run", "baseline", "bc", "--dataset", "pendulum-scripted", "--out", tmp_path / "runs", "--name", "bc", *TINY_RUN, check=True)
    for name in lowered:
        monkeypatch.delenv(name)

    run = read_run(tmp_path / "runs" / "bc")
    assert run.info["env"]["torch_cpu_capability"] == "DEFAULT" and run.info["env"]["numpy_simd"] == []
    calls, call_on_kernels = [], offbench.utils.call_on_kernels
    monkeypatch.setattr(offbench.utils, "call_on_kernels", lambda *args: (calls.append(args), call_on_kernels(*args))[1])
    verification = verify_run(run)
    assert verification["status"] == "verified" and verification["episodes"] == 2, verification
    assert [(module, variables) for module, _, variables in calls] == [("offbench.leaderboard.verify", lowered)]
