"""The machine a run ran on or a dataset was made on: what `run.json` records as `env` and a generated card as
`made_on`. The SIMD kernels torch and NumPy dispatch to decide the last bits of CPU arithmetic, so numbers (and data
a learner made) compare bit for bit only where they agree. Below every other layer: it imports no offbench module."""

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
        "device": device,
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


KERNEL_KEYS = ("torch_cpu_capability", "numpy_simd")  # what decides the last bits of CPU arithmetic (environment_info)


def made_on() -> dict[str, Any]:
    """What a generated dataset's card records of the machine that made it (`made_on`): the CPU, the numeric
    libraries and the SIMD kernels they dispatch to. Data trained into existence (SAC, PPO) or drawn through NumPy's
    sin/cos repeat bit for bit only where the kernels agree."""
    info = environment_info("cpu")
    return {key: info[key] for key in ("cpu", "torch", "numpy", *KERNEL_KEYS)}


def kernel_difference(there: Mapping[str, Any]) -> str | None:
    """How the SIMD kernels recorded in `there` (a run's env, a card's made_on) differ from this machine's, or None
    when they agree or were not recorded."""
    here = environment_info("cpu")
    differ = [f"{key}: {there[key]} there, {here[key]} here" for key in KERNEL_KEYS if key in there and there[key] != here[key]]
    return "; ".join(differ) or None
