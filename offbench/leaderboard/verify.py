"""Verification by re-evaluation: rebuild a run's policy from its checkpoint and replay its final evaluation.

Evaluation is deterministic (fixed episode seeds, greedy or generator-seeded sampled actions, deterministic kernels
on the CPU, replayed with the run's torch thread count), so a run recorded on the CPU must replay to the very same
returns, episode for episode. Where this machine's SIMD kernels differ from the run's and can be lowered to them, the
replay runs in a child process on the run's kernels; where they cannot (AVX-512 against AVX2 round some results
differently), a replay that differs leaves the run unverified rather than refused. A run
recorded on CUDA is replayed on CUDA where there is one, each return within `CUDA_RTOL` of the recorded one (CUDA
kernels may sum in another order from call to call); without CUDA it stays unverified. What can be rebuilt:

    built-in, plugin   `offbench.training.trainer.open_run` + the checkpoint, as `offbench evaluate` does
    own code           the `load(state)` function `offbench.track(...).checkpoint(..., load=...)` recorded
    black box          nothing: admitted, marked unverified

A replay that differs refuses the run, naming the first differing episode.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from offbench.errors import OffbenchError
from offbench.tracking.provenance import REPLAYABLE_KINDS
from offbench.tracking.read_run import CHECKPOINT, FinishedRun, Refused
from offbench.tracking.run_dir import utc_now

CUDA_RTOL = 1e-4
FINGERPRINT_TENSORS = 32  # largest tensors of a checkpoint kept in its fingerprint
SAME_WEIGHTS_SHARE = 0.5  # two checkpoints sharing this share of their fingerprinted elements hold the same weights


def method_of(run: FinishedRun) -> dict[str, Any]:
    """run.json `method`; runs from before it was recorded are built-in baselines."""
    method = run.info.get("method")
    return method if isinstance(method, dict) else {"kind": "built-in", "name": run.baseline}


def unverified(reason: str) -> dict[str, Any]:
    return {"status": "unverified", "reason": reason}


def verify_run(run: FinishedRun) -> dict[str, Any]:
    """The run's `verification` record: replayed and identical ("verified"), or why it cannot be replayed
    ("unverified"). A replay that differs from the record is Refused (rule `verify`)."""
    method = method_of(run)
    if method.get("kind") not in REPLAYABLE_KINDS:
        return unverified("black box: no code to rebuild the policy from")
    if not (run.path / CHECKPOINT).is_file():
        return unverified("no checkpoints/last.pt to rebuild the policy from")
    if method["kind"] == "own-code" and not method.get("load"):
        return unverified("own code without checkpoint(load=...): nothing rebuilds the policy")
    if method["kind"] == "plugin":
        from offbench.baselines import get_baseline

        try:
            get_baseline(run.baseline)
        except OffbenchError as exc:
            return unverified(f"the plugin is not usable here ({str(exc)[:200]})")
    device = _replay_device(run)
    if device is None:
        return unverified(f"recorded on {run.info['env'].get('device')}, and this machine has no CUDA to replay it on")
    final_step = run.summary["final"]["step"]
    try:
        replayed = replay_on_run_kernels(run, method, device, final_step)
    except OffbenchError as exc:
        raise Refused(run.path, "verify", f"cannot replay the final evaluation: {exc}") from None
    recorded = [row for row in run.evaluations if row["step"] == final_step]
    try:
        _compare(run, recorded, replayed, exact=device == "cpu")
    except Refused as exc:
        kernels = _other_kernels(run)
        if kernels is None:
            raise
        return unverified(f"replayed on other SIMD kernels ({kernels}), where the last digits may differ: {str(exc).split(': ', 2)[-1]}")
    from offbench.tracking.run_dir import code_version

    return {
        "status": "verified",
        "replayed_on": device,
        "at": utc_now(),
        "by": code_version(),
        "step": final_step,
        "episodes": sum(len(row["returns"]) for row in recorded),
    }


@contextmanager
def recorded_threads(run: FinishedRun):
    """torch's intra-op thread count as the run had it (run.json env.torch_threads): a matrix product split over
    another number of threads sums in another order, enough to move a return in its last digits."""
    import torch

    before, wanted = torch.get_num_threads(), run.info.get("env", {}).get("torch_threads")
    if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted >= 1:
        torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _other_kernels(run: FinishedRun) -> str | None:
    """How the SIMD kernels NumPy and torch dispatch to here differ from the run's (run.json env), or None: AVX-512
    and AVX2 machines round some results differently (docs/run-directory.md), so only a replay on the same kernels
    can be held to exact equality."""
    from offbench.machine import kernel_difference

    return kernel_difference(run.info.get("env", {}))


def replay_on_run_kernels(run: FinishedRun, method: dict[str, Any], device: str, step: int) -> list[dict[str, Any]]:
    """`replay` under the run's torch thread count, and on the run's SIMD kernels where this machine's differ and
    can be lowered to them (an AVX-512 machine replaying an AVX2 run): then in a child process started with the
    variables that select them (`offbench.machine.kernel_variables`), so the replay can be held to exact equality."""
    from offbench.machine import kernel_variables
    from offbench.utils import call_on_kernels, in_lowered_child

    variables = kernel_variables(run.info.get("env", {})) if device == "cpu" and not in_lowered_child() else None
    if not variables:  # the run's own kernels ({}), or kernels no setting reaches (None)
        with recorded_threads(run):
            return replay(run, method, device, step)
    with tempfile.TemporaryDirectory(prefix="offbench-replay-") as scratch:
        out = Path(scratch) / "replayed.json"
        call_on_kernels(__name__, [str(run.path), str(step), str(out)], variables)
        return json.loads(out.read_text())


def _replay_in_child(args: list[str]) -> None:
    """The child's side of `replay_on_run_kernels`: the run's final evaluation replayed, written as JSON (floats
    round-trip exactly)."""
    from offbench.tracking.read_run import read_run

    path, step, out = args
    run = read_run(path)
    with recorded_threads(run):
        replayed = replay(run, method_of(run), "cpu", int(step))
    Path(out).write_text(json.dumps(replayed))


def _replay_device(run: FinishedRun) -> str | None:
    recorded = str(run.info.get("env", {}).get("device", "cpu"))
    if not recorded.startswith("cuda"):
        return "cpu"
    import torch

    return recorded if torch.cuda.is_available() else None


def replay(run: FinishedRun, method: dict[str, Any], device: str, step: int) -> list[dict[str, Any]]:
    """The evaluation lines the run's final checkpoint gives now, under the run's own protocol."""
    import torch

    from offbench.training.trainer import load_checkpoint, open_run

    torch.use_deterministic_algorithms(device == "cpu")
    if method["kind"] == "own-code":
        from offbench.tracking.provenance import import_loader
        from offbench.tracking.track import Evaluator

        evaluator = Evaluator.of_run(run.info)
        _same_dataset(run, evaluator.data.store.content_sha256())
        checkpoint = torch.load(run.path / CHECKPOINT, map_location="cpu", weights_only=True)
        policy = import_loader(method["load"])(checkpoint["baseline"])
        return list(evaluator.evaluate(policy, step, run.baseline).records)
    opened = open_run(run.path, device)
    checkpoint = load_checkpoint(opened.run_dir, opened.device)
    if checkpoint is None:  # verify_run replays only a run with one; it went between the check and the replay
        raise OffbenchError(f"{run.path / CHECKPOINT}: no such checkpoint to replay")
    return opened.protocol().evaluate(opened.restored_baseline(checkpoint), step)


def _same_dataset(run: FinishedRun, checksum: str) -> None:
    if checksum != run.dataset_sha256:
        raise OffbenchError(f"dataset {run.dataset_id} has changed since the run (content checksum differs)")


def _compare(run: FinishedRun, recorded: list[dict[str, Any]], replayed: list[dict[str, Any]], exact: bool) -> None:
    if len(recorded) != len(replayed):
        raise Refused(
            run.path, "verify", f"the replay gave {len(replayed)} evaluation lines at the final step, the run recorded {len(recorded)}"
        )
    for old, new in zip(recorded, replayed):
        old_returns, new_returns = np.asarray(old["returns"], dtype=np.float64), np.asarray(new["returns"], dtype=np.float64)
        if old_returns.shape != new_returns.shape:
            raise Refused(run.path, "verify", f"the replay played {len(new_returns)} episodes, the run recorded {len(old_returns)}")
        same = old_returns == new_returns if exact else np.isclose(new_returns, old_returns, rtol=CUDA_RTOL, atol=0.0)
        if not same.all():
            episode = int(np.flatnonzero(~same)[0])
            target = "" if old.get("target_return") is None else f" (target return {old['target_return']:g})"
            raise Refused(
                run.path,
                "verify",
                f"final evaluation{target}, episode {episode}: replayed return {float(new_returns[episode])!r}, "
                f"recorded {float(old_returns[episode])!r} (evaluations.jsonl does not match the checkpoint)",
            )


# ---------------------------------------------------------------------------------------------- same weights
def weights_fingerprint(path: Path) -> list[list[Any]] | None:
    """[[sha256 prefix, elements], ...] of the FINGERPRINT_TENSORS largest floating-point tensors in a checkpoint's
    `baseline` state, whatever their keys: the same tensors re-saved under other keys, or beside an extra one, keep
    most of it, while independently trained runs share only untrained buffers."""
    import torch

    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - an unreadable checkpoint is one line naming it
        raise OffbenchError(f"{path}: unreadable checkpoint ({exc.__class__.__name__})") from None
    tensors = [
        t for t in _tensors(state.get("baseline", state) if isinstance(state, dict) else state) if t.is_floating_point() and t.numel() >= 2
    ]
    tensors.sort(key=lambda t: -t.numel())
    return [
        [hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()[:16], int(t.numel())]
        for t in tensors[:FINGERPRINT_TENSORS]
    ]


def _tensors(value: Any):
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from _tensors(inner)
    elif isinstance(value, (list, tuple)):
        for inner in value:
            yield from _tensors(inner)


def same_weights(a: list[list[Any]] | None, b: list[list[Any]] | None) -> bool:
    """Whether two fingerprints share at least SAME_WEIGHTS_SHARE of the smaller one's elements."""
    if not a or not b:
        return False
    shared = {digest for digest, _ in a} & {digest for digest, _ in b}
    smaller = min(sum(n for _, n in a), sum(n for _, n in b))
    return sum(n for digest, n in a if digest in shared) >= SAME_WEIGHTS_SHARE * smaller


if __name__ == "__main__":
    from offbench.utils import child_main

    sys.exit(child_main(_replay_in_child, sys.argv[1:]))
