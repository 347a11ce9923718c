"""The machine a run ran on or a dataset was made on: what `run.json` records as `env` and a generated card as
`made_on`. The SIMD kernels torch and NumPy dispatch to, and the code branch of MKL that runs torch's matmuls,
decide the last bits of CPU arithmetic, so numbers (and data a learner made) compare bit for bit only where they
agree (benchmarks/studies/pinned-data-here.md measures each). Below every other layer: it imports no offbench module."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def environment_info(device: str) -> dict[str, Any]:
    """Where a run ran. Includes the SIMD kernels NumPy and torch dispatch to: NumPy's AVX-512 sin/cos differ
    from its AVX2 ones in the last bits, enough to change a generated pendulum dataset and a run's returns, so
    two runs' numbers are comparable bit for bit only where these agree."""
    import numpy
    import torch
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    cpu = platform.processor()
    try:
        cpu = next(
            line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    info = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "numpy_simd": [feature for feature in __cpu_dispatch__ if __cpu_features__.get(feature)],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_branch": mkl_branch(),
        "device": device,
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


KERNEL_KEYS = ("torch_cpu_capability", "numpy_simd", "mkl_branch")  # what decides the last bits of CPU arithmetic

# oneMKL's code branches (mkl_cbwr.h). MKL_CBWR=<branch> fixes one, the same kernels on every CPU that supports it
MKL_BRANCHES = {
    2: "AUTO",
    3: "COMPATIBLE",
    4: "SSE2",
    6: "SSSE3",
    7: "SSE4_1",
    8: "SSE4_2",
    9: "AVX",
    10: "AVX2",
    11: "AVX512_MIC",
    12: "AVX512",
    13: "AVX512_MIC_E1",
    14: "AVX512_E1",
}
MKL_CBWR_BRANCH, MKL_CBWR_BRANCH_OFF = 1, 1


def mkl_branch() -> str | None:
    """The code branch of MKL, which runs torch's CPU matmuls, on this machine: the one MKL's own dispatch picks
    for this CPU (an Intel instruction set, or AUTO on CPUs it has no branch for, such as AMD's), or "CNR <branch>"
    where `MKL_CBWR` fixes one. Two machines at the same torch and NumPy kernels may still differ in their bits where
    this differs. None where torch has no MKL, or does not export MKL's query (only Linux wheels are known to)."""
    import ctypes

    import torch

    if not torch.backends.mkl.is_available():
        return None
    try:
        mkl = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        fixed = mkl.mkl_serv_cbwr_get(MKL_CBWR_BRANCH)
        if fixed != MKL_CBWR_BRANCH_OFF:
            return f"CNR {MKL_BRANCHES.get(fixed, fixed)}"
        auto = mkl.mkl_serv_cbwr_get_auto_branch()
    except (OSError, AttributeError):
        return None
    return MKL_BRANCHES.get(auto, str(auto))


def made_on() -> dict[str, Any]:
    """What a generated dataset's card records of the machine that made it (`made_on`): the CPU, the numeric
    libraries and the SIMD kernels they dispatch to. Data trained into existence (SAC, PPO) or drawn through NumPy's
    sin/cos repeat bit for bit only where the kernels agree."""
    info = environment_info("cpu")
    return {key: info[key] for key in ("cpu", "torch", "numpy", *KERNEL_KEYS)}


# torch's x86 kernel builds, lowest first: ATEN_CPU_CAPABILITY selects any build at or below the CPU's own
TORCH_CAPABILITIES = ("DEFAULT", "AVX2", "AVX512")


def kernel_variables(there: Mapping[str, Any], here: Mapping[str, Any] | None = None) -> dict[str, str] | None:
    """The environment variables that make a fresh process on this machine dispatch to the SIMD kernels recorded in
    `there` (a pin's or a card's made_on), or None where no setting reaches them (kernels this CPU lacks, another
    MKL branch, another architecture). Measured in benchmarks/studies/pinned-data-here.md: on an AVX-512 AMD EPYC these
    variables give every probe's bits of an AVX2 one, SAC on Hopper included. They act only before torch and NumPy
    load, so they are for a child process."""
    here = environment_info("cpu") if here is None else here
    variables: dict[str, str] = {}
    torch_there, torch_here = there.get("torch_cpu_capability"), here.get("torch_cpu_capability")
    if torch_there is not None and torch_there != torch_here:
        if torch_there not in TORCH_CAPABILITIES or torch_here not in TORCH_CAPABILITIES:
            return None
        if TORCH_CAPABILITIES.index(torch_there) > TORCH_CAPABILITIES.index(torch_here):
            return None
        variables["ATEN_CPU_CAPABILITY"] = torch_there.lower()
    numpy_there, numpy_here = there.get("numpy_simd"), list(here.get("numpy_simd") or [])
    if numpy_there is not None and list(numpy_there) != numpy_here:
        if not set(numpy_there) <= set(numpy_here):
            return None
        variables["NPY_DISABLE_CPU_FEATURES"] = " ".join(f for f in numpy_here if f not in numpy_there)
        if "X86_V4" in numpy_here and "X86_V4" not in numpy_there:
            # OpenBLAS's own AVX2 kernels, as it picks them on AVX2 CPUs (NumPy's matmuls; no generator uses them today)
            variables["OPENBLAS_CORETYPE"] = "Haswell"
    mkl_there, mkl_here = there.get("mkl_branch"), here.get("mkl_branch")
    if mkl_there is not None and mkl_there != mkl_here:
        if not str(mkl_there).startswith("CNR "):
            return None  # MKL's own dispatch picks its branch from the CPU; only a fixed (CNR) branch can be asked for
        variables["MKL_CBWR"] = str(mkl_there).removeprefix("CNR ")
    return variables


def kernel_difference(there: Mapping[str, Any]) -> str | None:
    """How the SIMD kernels recorded in `there` (a run's env, a card's made_on) differ from this machine's, or None
    when they agree or were not recorded."""
    here = environment_info("cpu")
    differ = [
        f"{key}: {there[key]} there, {here[key]} here" for key in KERNEL_KEYS if there.get(key) is not None and there[key] != here[key]
    ]
    return "; ".join(differ) or None
