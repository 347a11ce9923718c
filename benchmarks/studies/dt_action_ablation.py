"""Does a trained Decision Transformer act on its own previous actions, and how does it act when its context looks
like the data's? Re-evaluates a finished DT run's last checkpoint under the run's own protocol and seeds: as trained;
with every past action in its context replaced by a uniformly random action at every step (the newest step's
action is the one it predicts, so it is never seen); and, with --noise EPS, with the environment executing a
uniformly random action instead of the DT's with probability EPS at every step (the executed action enters the
context, as in data made by a policy with that noise). Prints the success rate and mean episode length of each;
writes nothing.

    .venv/bin/python benchmarks/studies/dt_action_ablation.py RUN_DIR [--seed 0] [--noise 0.75]

Answer: benchmarks/studies/multitask-dt-context.md (not its past actions; its context of its own greedy history,
unlike the data's, is what fails).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from offbench.baselines.dt import DTPolicy
from offbench.training.trainer import load_checkpoint, open_run


def evaluate(run, baseline, step: int) -> str:
    records = run.protocol(None, None).evaluate(baseline, step)
    return ", ".join(f"success {r['success_rate']:.3f}, mean length {np.mean(r['lengths']):.1f}" for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0, help="seed of the random actions")
    parser.add_argument("--noise", type=float, default=None, help="also evaluate with this probability of a random executed action")
    args = parser.parse_args()
    torch.set_num_threads(1)
    run = open_run(args.run_dir, "cpu")
    checkpoint = load_checkpoint(run.run_dir, run.device)
    if run.record["baseline"] != "dt" or not run.spec.discrete:
        raise SystemExit(f"{args.run_dir}: needs a dt run on discrete actions (this is a {run.record['baseline']} run)")
    baseline = run.restored_baseline(checkpoint)
    print(f"as trained:          {evaluate(run, baseline, checkpoint['step'])}")
    generator = torch.Generator().manual_seed(args.seed)
    predict = DTPolicy.predict

    def predict_from_random_past_actions(policy: DTPolicy) -> torch.Tensor:
        past = policy.actions[:, :-1]
        past.copy_(torch.randint(0, policy.dt.spec.action_dim, past.shape, generator=generator))
        return predict(policy)

    DTPolicy.predict = predict_from_random_past_actions
    print(f"random past actions: {evaluate(run, baseline, checkpoint['step'])}")
    DTPolicy.predict = predict
    if args.noise is None:
        return
    rng, act = np.random.default_rng(args.seed), DTPolicy.act

    def act_with_executed_noise(policy: DTPolicy, observations: np.ndarray) -> np.ndarray:
        chosen = act(policy, observations)
        executed = np.where(rng.random(len(chosen)) < args.noise, rng.integers(0, policy.dt.spec.action_dim, len(chosen)), chosen)
        policy.actions[:, -1] = torch.as_tensor(executed, dtype=policy.actions.dtype)
        return executed

    DTPolicy.act = act_with_executed_noise
    print(f"executed noise {args.noise:g}: {evaluate(run, baseline, checkpoint['step'])}")


if __name__ == "__main__":
    main()
