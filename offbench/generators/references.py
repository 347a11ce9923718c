"""The classic bandit algorithms' regret on given tasks: the references a regret figure draws beside in-context
runs. Multi-armed bandits: UCB1, Thompson sampling, uniform random. Contextual bandits: LinUCB, linear Thompson
sampling, uniform random.

They run the source algorithms that generate the learning histories (`offbench.generators.sources`,
`offbench.generators.contextual`) with their default hyper-parameters, on the environments the generators build;
random's curve is its exact expectation (best mean minus the mean over arms, every pull; for a contextual bandit
against each pull's context). Computed here, where the generators are, so that the figures only draw.
"""

from __future__ import annotations

import numpy as np

from offbench.envs import bandits, contextual_bandits
from offbench.envs.benchmarks import benchmark_for_env, card_tasks, make_batch_env, tabular
from offbench.errors import OffbenchError
from offbench.evaluation.rollout import evaluation_seed
from offbench.generators import contextual
from offbench.generators.sources import ALGORITHMS, RowStreams, make_config

REFERENCES = {"UCB1": "ucb", "Thompson sampling": "thompson"}
CONTEXTUAL_REFERENCES = {"LinUCB": "linucb", "linear Thompson sampling": "linear-thompson"}


def reference_pulls(env_spec: dict, tasks: list[dict], algo: str, pulls: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One history of `pulls` pulls per task by source algorithm `algo` (default hyper-parameters): the actions and
    rewards (tasks, pulls) and the mean pseudo-regret over tasks of each pull (pulls,)."""
    # The environment's rewards and the algorithm's draws come from independent streams, as in the generators
    # (one integer seeding both made them one stream; 20 seeds of Thompson sampling showed no bias either way).
    env_seed, algo_seed = np.random.SeedSequence(seed).spawn(2)
    env = tabular(make_batch_env(env_spec, tasks, seed=int(env_seed.generate_state(1)[0])), f"the {algo} reference needs")
    streams = RowStreams([np.random.default_rng(algo_seed)], [env.num_envs])
    learner = ALGORITHMS[algo](env, pulls, streams, make_config(algo, {}))
    rows = np.arange(env.num_envs)
    actions, rewards, regret = np.zeros((env.num_envs, pulls), np.int64), np.zeros((env.num_envs, pulls)), np.zeros(pulls)
    env.reset()
    for pull in range(pulls):
        actions[:, pull] = learner.act(env.state_index(), np.full(env.num_envs, pull))
        _, rewards[:, pull], terminated, _ = env.step(actions[:, pull])
        regret[pull] = np.mean(env.optimal_returns - env.expected_rewards(rows, actions[:, pull], rewards[:, pull]))
        learner.update(rows * env.num_actions + actions[:, pull], rewards[:, pull], env.state_index(), terminated)  # one state per row
        env.reset()
    return actions, rewards, regret


def reference_regret(env_spec: dict, tasks: list[dict], pulls: int, seed: int = 0, histories: int = 10) -> dict[str, np.ndarray]:
    """Mean over `tasks` and `histories` histories per task (seeds seed .. seed + histories - 1) of the cumulative
    pseudo-regret after each of `pulls` pulls, per reference algorithm. Several histories, because every ratio
    to Thompson sampling divides by this number: over 500 tasks one history's value at pull 100 has a standard deviation of
    0.15-0.2 (Thompson sampling on bandit-thompson-uniform, 20 seeds), ten histories' about 0.05."""
    curves = {
        name: np.cumsum(np.mean([reference_pulls(env_spec, tasks, algo, pulls, seed + k)[2] for k in range(histories)], axis=0))
        for name, algo in REFERENCES.items()
    }
    means = np.array([task["means"] for task in tasks], dtype=np.float64)
    curves["random"] = np.cumsum(np.full(pulls, np.mean(means.max(axis=1) - means.mean(axis=1))))
    return curves


def contextual_reference_regret(env_spec: dict, tasks: list[dict], pulls: int, env_seeds: list[int]) -> dict[str, np.ndarray]:
    """Mean over `tasks` and `env_seeds` of the cumulative regret after each of `pulls` pulls (each pull's
    max_a theta_a . x - theta_{a_t} . x) of LinUCB and linear Thompson sampling (default hyper-parameters), and
    random's expectation against the same contexts. The batch of `tasks` is seeded with each of `env_seeds`, as an
    in-context evaluation's is: it draws every row's context and reward noise whatever the arms pulled, so the
    references face the very contexts and noise that evaluation did. Thompson sampling draws from a stream spawned
    from the seed, apart from the environment's."""
    bench = benchmark_for_env(env_spec["id"])
    thetas = np.array([task["thetas"] for task in tasks], dtype=np.float64)
    per_pull = {name: [] for name in [*CONTEXTUAL_REFERENCES, "random"]}
    for seed in env_seeds:
        for name, algo in CONTEXTUAL_REFERENCES.items():
            env = bench.make_batch(tasks, seed=seed)
            algo_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
            histories = contextual.play(
                env, contextual.ALGORITHMS[algo](env, algo_rng, contextual.ALGORITHMS[algo].Config()), pulls, np.arange(len(tasks))
            )
            per_pull[name].append(histories.regret.mean(axis=0))
        means = np.einsum("rad,rpd->rpa", thetas, histories.contexts.astype(np.float64))  # every learner saw these contexts
        per_pull["random"].append((means.max(axis=2) - means.mean(axis=2)).mean(axis=0))
    return {name: np.cumsum(np.mean(curves, axis=0)) for name, curves in per_pull.items()}


def card_reference_regret(card, tasks: str, pulls: int, run_seeds: list[int]) -> dict[str, np.ndarray]:
    """The references on a bandit card's training tasks (`tasks` "train") or held-out ones (anything else: the
    in-context protocol's default), as its runs were evaluated; one line for a card that is no bandit. A contextual
    card's references run on the evaluation's own environment seeds (`evaluation_seed(s, 0)` of each run seed s:
    the same contexts as the runs); a multi-armed bandit's average ten histories of their own (`reference_regret`)."""
    env = dict(card.env)
    family = benchmark_for_env(str(env.get("id"))).family if env.get("suite") == "offbench" else None
    if family not in (bandits, contextual_bandits):
        raise OffbenchError(f"regret curves are for bandit runs; '{card.id}' is not a bandit dataset (use --kind in-context)")
    train, held_out = card_tasks(card)
    chosen = train if tasks == "train" else held_out
    if family is contextual_bandits:
        return contextual_reference_regret(env, chosen, pulls, [evaluation_seed(seed, 0) for seed in run_seeds])
    return reference_regret(env, chosen, pulls)
