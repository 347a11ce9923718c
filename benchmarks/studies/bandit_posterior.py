"""How close do AD's and DPT's action distributions come to the Bayes posterior of the best arm, on Bernoulli
bandits, and has a DPT run memorised its training contexts?

    .venv/bin/python benchmarks/studies/bandit_posterior.py RUN_DIR... [--histories 1000] [--seed 123] [--floor-histories 2000]

Answer: benchmarks/studies/bandit-posterior.md (AD has learnt the posterior, DPT on Thompson-sampling histories
has not, and its label is why) and bandit-dpt-rollin.md (memorisation of a small roll-in card).

On a `bandit-*-uniform` card every arm's mean is drawn from U(0, 1), so after a history of pulls the posterior of
each arm is Beta(1 + successes, 1 + failures) and the probability that arm i is the best is

    P(i best | history) = integral f_i(x) prod_{j != i} F_j(x) dx      (f, F: Beta density and distribution)

(computed on a midpoint grid of 1,000 points). That is the function both baselines are trained towards: DPT's label
(the task's best arm) has this distribution given the context, and so has AD's label (Thompson sampling's next pull,
which samples the same posterior). The script draws fresh Thompson-sampling histories on the card's held-out tasks,
feeds each run's last checkpoint the whole history (one forward pass reads every prefix), and reports per prefix
length: cross-entropy against the true best arm (the Bayes posterior's beside it), KL(Bayes || model), and the
expected regret of one pull sampled from the model's distribution (the Bayes posterior's beside it); and, once per
card, the Bayes floor of DPT's training loss on the card's own contexts (to read a run's logged loss against); and for DPT,
its loss on its first training contexts beside its loss on fresh contexts of the same roll-in on the held-out tasks
(a model below the floor on the first and above it on the second has memorised its training contexts). The adversarial
split's prior is not uniform, so the Beta(1, 1) posterior is not its Bayes posterior: the script refuses it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import typer
from scipy import special, stats

from offbench.envs.benchmarks import card_tasks
from offbench.errors import OffbenchError
from offbench.generators.references import reference_pulls
from offbench.training.trainer import load_checkpoint, open_run

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.common import cli_help  # noqa: E402

GRID = (np.arange(1000) + 0.5) / 1000
BUCKETS = [(0, 1), (1, 10), (10, 30), (30, 60), (60, 101)]


class BestArmPosterior:
    """P(i best | counts) for U(0, 1) priors. Counts are small integers, so the Beta densities and log distribution
    functions on the grid are tabled once per (successes, failures) pair with at most `pulls` pulls in all."""

    def __init__(self, pulls: int):
        s, f = np.meshgrid(np.arange(pulls + 1), np.arange(pulls + 1), indexing="ij")
        a, b = 1 + s[..., None], 1 + f[..., None]
        self.density = stats.beta.pdf(GRID, a, b)
        # special.betainc is ten times faster than stats.beta.logcdf (same to 1e-14); log(0) = -inf where it underflows
        with np.errstate(divide="ignore"):
            self.log_cdf = np.log(special.betainc(a, b, GRID))

    def __call__(self, successes: np.ndarray, failures: np.ndarray) -> np.ndarray:
        """(N, A) counts -> (N, A) probability that each arm has the largest mean."""
        s, f = successes.astype(np.int64), failures.astype(np.int64)
        log_cdf = self.log_cdf[s, f]
        # the other arms' sum as the sum of the arms before plus the arms after, not total - own: where two arms' log
        # CDFs are -inf at a grid point (Beta(101, 1)'s underflows near 0), total - own is -inf - -inf = nan
        zero = np.zeros_like(log_cdf[:, :1])
        before = np.cumsum(np.concatenate([zero, log_cdf[:, :-1]], axis=1), axis=1)
        after = np.flip(np.cumsum(np.concatenate([zero, np.flip(log_cdf, axis=1)[:, :-1]], axis=1), axis=1), axis=1)
        others = np.exp(before + after)
        p = (self.density[s, f] * others).mean(axis=-1)
        return p / p.sum(axis=1, keepdims=True)


def best_arm_posteriors(actions: np.ndarray, rewards: np.ndarray, arms: int) -> np.ndarray:
    """The Bayes posterior of the best arm before every pull of each history and after the last: (N, pulls + 1, A)."""
    n, pulls = actions.shape
    pulled = np.eye(arms)[actions]
    successes = np.concatenate([np.zeros((n, 1, arms)), np.cumsum(pulled * rewards[..., None], axis=1)], axis=1)
    failures = np.concatenate([np.zeros((n, 1, arms)), np.cumsum(pulled * (1 - rewards[..., None]), axis=1)], axis=1)
    best_arm_posterior = BestArmPosterior(pulls)
    return np.stack([best_arm_posterior(successes[:, t], failures[:, t]) for t in range(pulls + 1)], axis=1)


@torch.no_grad()
def model_probabilities(name: str, model: torch.nn.Module, spec, actions: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """An AD or DPT model's action distribution after every prefix of each history: (N, P, A), P = pulls (AD) or
    pulls + 1 (DPT)."""
    model.eval()
    n, pulls = actions.shape
    observations = torch.zeros(n, pulls, *spec.observation_shape)
    acts, rews = torch.as_tensor(actions), torch.as_tensor(rewards)
    if name == "dpt":
        logits = model(torch.zeros(n, *spec.observation_shape), observations, acts, rews, observations)
    elif name == "ad":
        logits = model(observations, acts, rews)
    else:
        raise OffbenchError(f"a {name} model; this measures ad and dpt models")
    return torch.softmax(logits.float(), dim=-1).double().numpy()


def uniform_bandit_card(card, where: str) -> dict:
    card = card.to_dict() if card is not None else {}
    params = card.get("source", {}).get("recipe", {}).get("params", {})
    if card.get("env", {}).get("id") != "offbench/BernoulliBandit-v0" or params.get("variant") != "uniform":
        raise OffbenchError(f"{where}: needs a uniform-split Bernoulli bandit card (the posterior assumes U(0, 1) arm means)")
    return card


def held_out_histories(card: dict, histories: int, seed: int):
    """Fresh Thompson-sampling histories (the generators' source algorithm) on the card's held-out tasks, cycled:
    means, actions, rewards, posterior."""
    _, held_out = card_tasks(card)
    tasks = [held_out[i % len(held_out)] for i in range(histories)]
    means = np.array([task["means"] for task in tasks])
    actions, rewards, _ = reference_pulls(card["env"], tasks, "thompson", int(card["source"]["recipe"]["params"]["episodes"]), seed)
    return means, actions, rewards.astype(np.float32), best_arm_posteriors(actions, rewards, means.shape[1])


def training_floor(actions: np.ndarray, rewards: np.ndarray, best: np.ndarray, arms: int) -> dict[str, float]:
    """The Bayes floor of DPT's loss on a card's own training contexts (`training_contexts`: whole histories, every
    prefix as DPT trains them): the posterior's cross-entropy against each task's best arm, also at the full context,
    and how often the posterior's argmax there is the best arm (the best full-context accuracy)."""
    posterior = best_arm_posteriors(actions, rewards, arms)
    cross_entropy = -np.log(posterior[np.arange(len(best)), :, best] + 1e-12)
    return {
        "all prefixes": cross_entropy.mean(),
        "full context": cross_entropy[:, -1].mean(),
        "full-context accuracy": (posterior[:, -1].argmax(-1) == best).mean(),
    }


def training_contexts(store, histories: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A card's first `histories` training histories, whole: actions, rewards, each task's best arm."""
    pulls = int(store.card["source"]["recipe"]["params"]["episodes"])
    actions = np.asarray(store.actions).reshape(-1, pulls)[:histories].astype(np.int64)
    rewards = np.asarray(store.rewards).reshape(-1, pulls)[:histories].astype(np.float64)
    best = np.asarray(store.columns["optimal_action"]).reshape(-1, pulls)[:histories, 0].astype(np.int64)
    return actions, rewards, best


def fresh_contexts(card: dict, histories: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Contexts drawn as the card's own (its source algorithm) on its held-out tasks, cycled: the same distribution
    as the training contexts, on tasks no run trained on."""
    _, held_out = card_tasks(card)
    tasks = [held_out[i % len(held_out)] for i in range(histories)]
    params = card["source"]["recipe"]["params"]
    actions, rewards, _ = reference_pulls(card["env"], tasks, params["algo"], int(params["episodes"]), seed)
    return actions, rewards, np.array([task["means"] for task in tasks]).argmax(axis=1)


def prefix_cross_entropy(probs: np.ndarray, best: np.ndarray) -> float:
    """Mean over histories and prefixes of -log p(best arm): DPT's training loss."""
    return float(-np.log(probs[np.arange(len(best)), :, best] + 1e-12).mean())


def per_prefix_measures(probs: np.ndarray, posterior: np.ndarray, means: np.ndarray) -> dict[str, np.ndarray]:
    """Each measure's mean over histories, per prefix length."""
    n, prefixes, _ = probs.shape
    bayes = posterior[:, :prefixes]
    best, gap = means.argmax(axis=1), means.max(axis=1, keepdims=True) - means
    rows = np.arange(n)
    return {
        "cross-entropy": -np.log(probs[rows, :, best] + 1e-12).mean(0),
        "Bayes cross-entropy": -np.log(bayes[rows, :, best] + 1e-12).mean(0),
        "KL(Bayes || model)": (bayes * (np.log(bayes + 1e-12) - np.log(probs + 1e-12))).sum(-1).mean(0),
        "regret of a sampled pull": (probs * gap[:, None]).sum(-1).mean(0),
        "Bayes regret of a sampled pull": (bayes * gap[:, None]).sum(-1).mean(0),
    }


def report(probs: np.ndarray, posterior: np.ndarray, means: np.ndarray) -> None:
    """Print the measures averaged over prefix ranges, and the sampled-pull regret summed over every pull."""
    per_prefix = per_prefix_measures(probs, posterior, means)
    prefixes, pulls = probs.shape[1], posterior.shape[1] - 1
    buckets = [(lo, min(hi, prefixes)) for lo, hi in BUCKETS if lo < prefixes]
    table = pd.DataFrame({f"prefixes {lo}-{hi - 1}": {k: v[lo:hi].mean() for k, v in per_prefix.items()} for lo, hi in buckets})
    table["all"] = {k: v.mean() for k, v in per_prefix.items()}
    print(table.round(4).to_string())
    print(
        f"sum over pulls 1-{pulls} of the regret of a sampled pull: model {per_prefix['regret of a sampled pull'][:pulls].sum():.2f}, "
        f"Bayes {per_prefix['Bayes regret of a sampled pull'][:pulls].sum():.2f}"
    )


def main(
    run_dirs: list[Path] = typer.Argument(..., help="AD or DPT run directories on a bandit-*-uniform card"),
    histories: int = typer.Option(1000, help="fresh Thompson-sampling histories (cycling over the held-out tasks)"),
    seed: int = typer.Option(123, help="seed of the histories (the same for every run)"),
    floor_histories: int = typer.Option(2000, help="training histories for the Bayes floor of DPT's loss on each card (0: skip)"),
) -> None:
    torch.set_num_threads(1)
    cards: dict[str, dict] = {}  # card id -> its held-out TS histories, Bayes floor and (for DPT) fresh roll-in contexts
    for run_dir in run_dirs:
        run = open_run(run_dir)
        card = uniform_bandit_card(run.dataset.card, str(run_dir))
        if card["id"] not in cards:
            cards[card["id"]] = {"histories": held_out_histories(card, histories, seed)}
            if floor_histories > 0:  # read once per card: the floor here, each DPT run's loss on them below
                seen = cards[card["id"]]["seen"] = training_contexts(run.dataset.store, floor_histories)
                floor = cards[card["id"]]["floor"] = training_floor(*seen, int(run.dataset.store.action_space.n))
                print(
                    f"\n{card['id']}: Bayes floor of DPT's loss on its first {floor_histories} training histories: "
                    f"{floor['all prefixes']:.3f} nats over every prefix, {floor['full context']:.3f} at the full context, "
                    f"where the posterior's argmax is the best arm {floor['full-context accuracy']:.1%} of the time"
                )
        measured = cards[card["id"]]
        means, actions, rewards, posterior = measured["histories"]
        checkpoint = load_checkpoint(run.run_dir, run.device)
        if checkpoint is None:
            raise OffbenchError(f"{run_dir}: no checkpoint yet (checkpoints/last.pt)")
        model = run.restored_baseline(checkpoint).model
        probs = model_probabilities(run.record["baseline"], model, run.spec, actions, rewards)
        print(
            f"\n{run_dir} ({run.record['baseline']}, seed {run.seed}, update {checkpoint['step']}; {histories} Thompson-sampling histories)"
        )
        report(probs, posterior, means)
        if run.record["baseline"] == "dpt" and floor_histories > 0:
            if "fresh" not in measured:
                fresh = fresh_contexts(card, floor_histories, seed)
                measured["fresh"] = fresh, prefix_cross_entropy(best_arm_posteriors(*fresh[:2], run.spec.action_dim), fresh[2])
            (fresh, fresh_floor), seen = measured["fresh"], measured["seen"]
            seen_loss, fresh_loss = (
                prefix_cross_entropy(model_probabilities("dpt", model, run.spec, a, r.astype(np.float32)), best)
                for a, r, best in (seen, fresh)
            )
            print(
                f"DPT's loss over every prefix (Bayes floor): its first {floor_histories} training contexts {seen_loss:.3f} "
                f"({measured['floor']['all prefixes']:.3f}), as many fresh contexts of the same roll-in on the held-out tasks "
                f"{fresh_loss:.3f} ({fresh_floor:.3f})"
            )


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)  # --help: the question, the command and where the answer stands
    typer.run(main)
