"""Which library's SIMD dispatch decides the bits of generated data? Each setting below runs a probe in a fresh
process (dispatch is chosen when a library loads, so the variables must be set before it): NumPy's float32 and
float64 transcendental functions and its OpenBLAS matmul, torch's elementwise kernels and its MKL matmul, and a
short stable-baselines3 SAC run on Hopper-v4 (the kind of run behind the mujoco-local and metaworld-learned data),
all on one thread unless a setting says otherwise.
Each cell is the first 12 hex digits of a sha256 of the results; a cell that differs from the default row's
means that setting changes those bits on this machine. Run it on two machines and compare the `portable` rows to
learn whether a setting makes both machines' bits the same.

    .venv/bin/python benchmarks/studies/kernel_bits.py --sac-steps 1500

Answer: benchmarks/studies/pinned-data-here.md, "Which library's dispatch decides the bits".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

# NumPy's dispatch targets above AVX2 (numpy 2.x names); disabling one the CPU lacks is harmless
NUMPY_ABOVE_AVX2 = "X86_V4 AVX512_ICL AVX512_SPR"

SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "torch kernels DEFAULT": {"ATEN_CPU_CAPABILITY": "default"},
    "torch kernels AVX2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "MKL branch AVX2": {"MKL_CBWR": "AVX2"},
    "MKL branch COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
    "NumPy without AVX2": {"NPY_DISABLE_CPU_FEATURES": "X86_V3 " + NUMPY_ABOVE_AVX2},
    "NumPy without AVX-512": {"NPY_DISABLE_CPU_FEATURES": NUMPY_ABOVE_AVX2},
    "OpenBLAS Nehalem": {"OPENBLAS_CORETYPE": "Nehalem"},
    "OpenBLAS on 2 threads": {"OMP_NUM_THREADS": "2"},
    "AVX2 kernels, MKL AUTO": {"ATEN_CPU_CAPABILITY": "avx2", "NPY_DISABLE_CPU_FEATURES": NUMPY_ABOVE_AVX2},
    "portable": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "COMPATIBLE",
        "NPY_DISABLE_CPU_FEATURES": NUMPY_ABOVE_AVX2,
        "OPENBLAS_CORETYPE": "Haswell",
    },
}

COLUMNS = ("numpy_f32_trig", "numpy_f64_trig", "numpy_blas", "torch_elementwise", "torch_matmul", "sac")


def digest(*arrays) -> str:
    import numpy as np

    hashed = hashlib.sha256()
    for array in arrays:
        hashed.update(np.ascontiguousarray(array).tobytes())
    return hashed.hexdigest()[:12]


def probe(sac_steps: int) -> dict[str, str | float]:
    """The hashes of this process's results, as the environment's variables set its dispatch."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    x = np.random.default_rng(0).uniform(-10, 10, 100_000)
    a, b = np.random.default_rng(1).standard_normal((64, 300)), np.random.default_rng(2).standard_normal((300, 64))
    t = torch.from_numpy(np.random.default_rng(3).standard_normal((256, 300)).astype(np.float32))
    w = torch.from_numpy(np.random.default_rng(4).standard_normal((256, 300)).astype(np.float32))
    xf = x.astype(np.float32)
    result: dict[str, str | float] = {
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "numpy_f32_trig": digest(np.sin(xf), np.cos(xf), np.exp(xf), np.tanh(xf)),
        "numpy_f64_trig": digest(np.sin(x), np.cos(x), np.exp(x), np.tanh(x)),
        "numpy_blas": digest(a @ b),
        "torch_elementwise": digest(torch.tanh(t).numpy(), torch.exp(t).numpy(), torch.nn.functional.softplus(t).numpy()),
        "torch_matmul": digest((t @ w.T).numpy()),
        "sac": "-",
        "sac_seconds": 0.0,
    }
    if sac_steps:
        import gymnasium as gym
        from stable_baselines3 import SAC

        started = time.process_time()
        model = SAC("MlpPolicy", gym.make("Hopper-v4"), seed=0, device="cpu", learning_starts=500, verbose=0)
        model.learn(sac_steps)
        result["sac"] = digest(*[parameter.detach().numpy() for parameter in model.actor.parameters()])
        result["sac_seconds"] = time.process_time() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sac-steps", type=int, default=1500, help="SAC steps per setting (the first 500 random); 0 skips SAC")
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(probe(args.sac_steps)))
        return

    from importlib.metadata import version

    from offbench.machine import made_on

    here = made_on()
    libraries = ", ".join(f"{name} {version(name)}" for name in ("numpy", "torch", "stable-baselines3", "gymnasium", "mujoco"))
    print(
        f"this machine: {here['cpu']}, torch kernels {here['torch_cpu_capability']}, NumPy {here['numpy_simd']}, MKL branch {here['mkl_branch']}; {libraries}\n"
    )
    print("| setting | variables | torch kernels | " + " | ".join(COLUMNS) + " | SAC CPU-s |")
    print("|:--|:--|:--|" + ":--|" * len(COLUMNS) + "--:|")
    kept = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE", "OMP_NUM_THREADS")
    base = {key: value for key, value in os.environ.items() if key not in kept}
    for name in args.settings:
        variables = SETTINGS[name]
        proc = subprocess.run(
            [sys.executable, __file__, "--probe", "--sac-steps", str(args.sac_steps)],
            env={**base, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", **variables},
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        shown = " ".join(f"{key}={value}" for key, value in variables.items()) or "-"
        cells = " | ".join(str(result[column]) for column in COLUMNS)
        print(f"| {name} | {shown} | {result['torch_capability']} | {cells} | {result['sac_seconds']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
