"""Why does DPT lag AD on Bernoulli bandits? The same DPT model, data, batches and optimiser, trained with DPT's
label or with AD's, then measured against the Bayes posterior of the best arm (benchmarks/studies/bandit_posterior.py).

    .venv/bin/python benchmarks/studies/dpt_label_ablation.py --label best-arm   [--updates 8000] [--seed 0]
    .venv/bin/python benchmarks/studies/dpt_label_ablation.py --label next-pull  [--updates 8000] [--seed 0]

Answer: benchmarks/studies/bandit-posterior.md (the label is the whole difference).

- `best-arm` is DPT (`DecisionPretrainedTransformer.update`): every prefix of a history carries the one label, the
  task's best arm.
- `next-pull` keeps everything but the label: the output after j transitions is trained on the history's pull j + 1
  (Thompson sampling's next action, AD's label). Given the prefix, that label has the same distribution as the best
  arm (Thompson sampling pulls each arm with its posterior probability of being the best, under the same U(0, 1)
  prior the tasks are drawn from), so both losses have the same minimiser; what differs is that a history carries
  100 independent label draws instead of one.

`--warm-start N` trains the first N updates with `next-pull`, then goes on with `--label`: does DPT's own objective
keep the fit AD's label found (the fit is a stable point of it), or leave it? `--ema D` also measures an exponential
moving average of the weights (is the gap noise in the weights around a good solution?).

Both use the card's standard DPT config (`baselines/dpt/bandit-thompson.toml` on the default
`bandit-thompson-uniform`), its cosine decay ending at `--updates`, the sampler seeded as a run with `--seed` would
be, one torch thread.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import typer
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.studies.bandit_posterior import held_out_histories, model_probabilities, report, uniform_bandit_card  # noqa: E402
from offbench.baselines.dpt import DecisionPretrainedTransformer  # noqa: E402
from offbench.data.resolve import open_dataset  # noqa: E402
from offbench.data.spec import DatasetSpec  # noqa: E402
from offbench.training.config import resolve_config  # noqa: E402
from offbench.training.trainer import baseline_sampler, seed_everything  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.common import cli_help  # noqa: E402

DATASET = "bandit-thompson-uniform"
LABELS = ("best-arm", "next-pull")


class LabelAblationDPT(DecisionPretrainedTransformer):
    """DPT, with AD's label while `next_pull` is set: the output after j transitions is trained on the context's
    pull j + 1, and the output after all of them (no next pull) is left out. Only the label differs from DPT."""

    next_pull = False

    def prefix_labels(self, batch: dict[str, torch.Tensor], prefixes: int) -> torch.Tensor:
        if not self.next_pull:
            return super().prefix_labels(batch, prefixes)
        pulls = batch["context_actions"]
        return torch.cat([pulls, torch.full_like(pulls[:, :1], -100)], dim=1)[:, :prefixes]


def main(
    label: str = typer.Option(..., help="best-arm (DPT's) or next-pull (AD's)"),
    updates: int = typer.Option(8000, help="updates; the cosine schedule ends here"),
    seed: int = typer.Option(0),
    dataset: str = typer.Option(DATASET, help="a uniform-split Bernoulli bandit card (its standard DPT config applies)"),
    histories: int = typer.Option(1000, help="fresh Thompson-sampling histories to measure the fit on"),
    warm_start: int = typer.Option(0, help="train the first N updates with the next-pull label, then with --label"),
    ema: float = typer.Option(0.0, help="also measure an exponential moving average of the weights with this decay (0: none)"),
) -> None:
    if label not in LABELS:
        raise typer.BadParameter(f"--label must be one of {', '.join(LABELS)}")
    torch.set_num_threads(1)
    config = resolve_config(LabelAblationDPT, dataset, overrides=[f"cosine_steps={updates}"])
    data = open_dataset(dataset)
    spec = DatasetSpec.from_store(data.store)
    seed_everything(seed, torch.device("cpu"))
    dpt = LabelAblationDPT(config.baseline, spec)
    sampler = baseline_sampler(dpt, data.store, config.train.batch_size, seed)
    averaged = AveragedModel(dpt.model, multi_avg_fn=get_ema_multi_avg_fn(ema)) if ema > 0 else None
    start = time.perf_counter()
    for step in range(1, updates + 1):
        batch = sampler.sample()
        dpt.next_pull = label == "next-pull" or step <= warm_start
        loss = dpt.update(batch)["action_loss"]
        if averaged is not None:
            averaged.update_parameters(dpt.model)
        if step % 1000 == 0:
            print(f"update {step}: loss {loss:.3f} ({time.perf_counter() - start:.0f} s)", flush=True)
    means, actions, rewards, posterior = held_out_histories(uniform_bandit_card(data.card, dataset), histories, 123)
    warm = f" after {warm_start} with next-pull" if warm_start else ""
    print(f"\nDPT model, label {label}{warm}, seed {seed}, {updates} updates at batch {config.train.batch_size}; {histories} histories")
    report(model_probabilities("dpt", dpt.model, spec, actions, rewards), posterior, means)
    if averaged is not None:
        print(f"\nthe moving average of its weights (decay {ema})")
        report(model_probabilities("dpt", averaged.module, spec, actions, rewards), posterior, means)


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)  # --help: the question, the command and where the answer stands
    typer.run(main)
