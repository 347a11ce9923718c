"""TD3+BC (Fujimoto & Gu, 2021, "A Minimalist Approach to Offline Reinforcement Learning", arXiv:2106.06860),
written as a user's own training loop on offbench's public API: one file, nothing of offbench's trainer.

    normalise states with the dataset's mean and std
    for t = 1 .. steps:
        draw a batch (s, a, r, s', d) of transitions; d = 1 only where the MDP terminated (a time limit is not d)
        a' = clip(pi_target(s') + clip(N(0, policy_noise), -noise_clip, noise_clip), low, high)   target smoothing
        y  = r + discount * (1 - d) * min(Q1_target(s', a'), Q2_target(s', a'))                      clipped double Q
        minimise (Q1(s, a) - y)^2 + (Q2(s, a) - y)^2
        every policy_delay steps:
            lambda = alpha / mean |Q1(s, pi(s))|                          Q's scale divided out of the actor loss
            minimise -lambda * Q1(s, pi(s)) + (pi(s) - a)^2                          TD3's actor loss + behaviour cloning
            move every target network towards its network by tau

offbench's part: `offbench.track` writes the run directory (config, metrics, evaluations under the dataset card's
protocol, checkpoint), and `build_policy` rebuilds the evaluated actor from a checkpoint, so a leaderboard can
replay the final evaluation (`offbench submit RUN... --benchmark pendulum-scripted --verify`). The replay imports
this file, so training runs only under `if __name__ == "__main__":`.

    python examples/td3_bc.py --dataset pendulum-scripted --seed 0 --steps 10000 --eval-every 1000 --episodes 10 --out runs
"""

import argparse
import copy
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import offbench


@dataclass
class TD3BCConfig:
    """The paper's hyper-parameters (Fujimoto & Gu 2021, appendix table of TD3+BC hyper-parameters), which are also
    CORL's defaults (tinkoff-ai/CORL, algorithms/offline/td3_bc.py, TrainConfig and train())."""

    seed: int = 0
    steps: int = 1_000_000  # gradient steps (paper and CORL: 1M; the pendulum-scripted board's CQL row: 10k)
    batch_size: int = 256
    discount: float = 0.99
    tau: float = 0.005  # target networks: theta' <- tau * theta + (1 - tau) * theta'
    policy_noise: float = 0.2  # std of the target policy smoothing noise, in units of the largest action
    noise_clip: float = 0.5  # that noise is clipped to +-noise_clip, in units of the largest action
    policy_delay: int = 2  # one actor (and target) update every policy_delay critic updates
    alpha: float = 2.5  # weight of the Q term against the behaviour-cloning term
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    hidden_dim: int = 256  # actor and critics: 2 hidden ReLU layers of 256
    hidden_layers: int = 2
    normalize_states: bool = True  # states standardised with the dataset's mean and std
    state_std_eps: float = 1e-3  # added to the std (CORL's compute_mean_std)
    log_every: int = 100  # offbench: a metrics.jsonl line every log_every steps (not a hyper-parameter)


def mlp(inputs: int, outputs: int, hidden_dim: int, hidden_layers: int) -> nn.Sequential:
    layers, width = [], inputs
    for _ in range(hidden_layers):
        layers += [nn.Linear(width, hidden_dim), nn.ReLU()]
        width = hidden_dim
    return nn.Sequential(*layers, nn.Linear(width, outputs))


class Actor(nn.Module):
    """Deterministic policy: standardised state -> action inside [low, high] (a scaled tanh; on a symmetric box
    this is the paper's max_action * tanh)."""

    def __init__(self, state_dim: int, action_low: torch.Tensor, action_high: torch.Tensor, hidden_dim: int, hidden_layers: int):
        super().__init__()
        self.net = mlp(state_dim, len(action_low), hidden_dim, hidden_layers)
        self.register_buffer("action_low", action_low.clone())
        self.register_buffer("action_high", action_high.clone())

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        centre, half_range = (self.action_high + self.action_low) / 2, (self.action_high - self.action_low) / 2
        return centre + half_range * torch.tanh(self.net(states))


class Critic(nn.Module):
    """Q(s, a) from the standardised state and the action."""

    def __init__(self, state_dim: int, action_dim: int, hidden_dim: int, hidden_layers: int):
        super().__init__()
        self.net = mlp(state_dim + action_dim, 1, hidden_dim, hidden_layers)

    def forward(self, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([states, actions], dim=-1)).squeeze(-1)


class ActorPolicy:
    """What offbench evaluates: a plain callable, raw observations (rows, state_dim) -> actions (rows, action_dim)."""

    def __init__(self, actor: Actor, state_mean: torch.Tensor, state_std: torch.Tensor):
        self.actor, self.state_mean, self.state_std = actor, state_mean, state_std
        self.low, self.high = actor.action_low.numpy(), actor.action_high.numpy()

    @torch.inference_mode()
    def __call__(self, observations: np.ndarray) -> np.ndarray:
        states = (torch.as_tensor(observations, dtype=torch.float32) - self.state_mean) / self.state_std
        return np.clip(self.actor(states).numpy(), self.low, self.high)  # float32 rounding of the tanh stays inside


def build_policy(state: dict) -> ActorPolicy:
    """Rebuild the evaluated policy from a checkpoint's state: what `offbench submit --verify` replays."""
    actor = Actor(len(state["state_mean"]), state["action_low"], state["action_high"], state["hidden_dim"], state["hidden_layers"])
    actor.load_state_dict(state["actor"])
    return ActorPolicy(actor, state["state_mean"], state["state_std"])


class TD3BC:
    """The networks, their targets and optimisers, and one update (the algorithm box in the module docstring)."""

    def __init__(self, config: TD3BCConfig, state_dim: int, action_low: torch.Tensor, action_high: torch.Tensor):
        self.config = config
        self.actor = Actor(state_dim, action_low, action_high, config.hidden_dim, config.hidden_layers)
        self.critics = nn.ModuleList(Critic(state_dim, len(action_low), config.hidden_dim, config.hidden_layers) for _ in range(2))
        self.actor_target, self.critics_target = copy.deepcopy(self.actor), copy.deepcopy(self.critics)
        self.actor_optimiser = torch.optim.Adam(self.actor.parameters(), lr=config.actor_lr)
        self.critic_optimiser = torch.optim.Adam(self.critics.parameters(), lr=config.critic_lr)
        max_action = float(torch.max(action_high.abs().max(), action_low.abs().max()))  # CORL scales the noise by max_action
        self.noise_std, self.noise_clip = config.policy_noise * max_action, config.noise_clip * max_action
        self.action_low, self.action_high = action_low, action_high
        self.updates = 0
        self.last_actor_losses: dict[str, float] = {}

    def update(self, states, actions, rewards, next_states, terminals) -> dict[str, float]:
        config = self.config
        self.updates += 1
        with torch.no_grad():
            noise = (torch.randn_like(actions) * self.noise_std).clamp(-self.noise_clip, self.noise_clip)
            next_actions = torch.max(torch.min(self.actor_target(next_states) + noise, self.action_high), self.action_low)
            next_q = torch.min(*(critic(next_states, next_actions) for critic in self.critics_target))
            targets = rewards + config.discount * (1.0 - terminals) * next_q
        critic_loss = sum(F.mse_loss(critic(states, actions), targets) for critic in self.critics)
        self.critic_optimiser.zero_grad()
        critic_loss.backward()
        self.critic_optimiser.step()

        if self.updates % config.policy_delay == 0:
            policy_actions = self.actor(states)
            q = self.critics[0](states, policy_actions)
            lmbda = config.alpha / q.abs().mean().detach()
            bc_loss = F.mse_loss(policy_actions, actions)
            actor_loss = -lmbda * q.mean() + bc_loss
            self.actor_optimiser.zero_grad()
            actor_loss.backward()
            self.actor_optimiser.step()
            with torch.no_grad():
                for network, target in ((self.actor, self.actor_target), (self.critics, self.critics_target)):
                    for parameter, target_parameter in zip(network.parameters(), target.parameters()):
                        target_parameter.lerp_(parameter, config.tau)
            self.last_actor_losses = {"actor_loss": actor_loss.item(), "bc_loss": bc_loss.item(), "q_mean": q.mean().item()}
        return {"critic_loss": critic_loss.item(), **self.last_actor_losses}


def train(config: TD3BCConfig, dataset: str, out: str, name: str | None, episodes: int, eval_every: int) -> None:
    torch.manual_seed(config.seed)
    torch.use_deterministic_algorithms(True)  # CPU: the same seed gives the same run, and --verify replays it exactly
    with offbench.track(
        "td3-bc", dataset=dataset, seed=config.seed, config=asdict(config), out=out, name=name, episodes=episodes, eval_every=eval_every
    ) as run:
        data = run.dataset
        observations = np.asarray(data.observations, dtype=np.float64)
        if config.normalize_states:
            state_mean = torch.as_tensor(observations.mean(axis=0), dtype=torch.float32)
            state_std = torch.as_tensor(observations.std(axis=0) + config.state_std_eps, dtype=torch.float32)
        else:
            state_mean, state_std = torch.zeros(observations.shape[1]), torch.ones(observations.shape[1])
        action_low = torch.as_tensor(data.action_space.low, dtype=torch.float32)
        action_high = torch.as_tensor(data.action_space.high, dtype=torch.float32)
        agent = TD3BC(config, observations.shape[1], action_low, action_high)
        batches = run.sampler("transitions", batch_size=config.batch_size)  # seeded with the run's seed
        print(f"{run.run_dir}: TD3+BC on {dataset}, {data.num_transitions} transitions, {config.steps} steps")
        started = time.perf_counter()
        for step in range(1, config.steps + 1):
            batch = batches.sample()
            losses = agent.update(
                (batch["observations"] - state_mean) / state_std,
                batch["actions"],
                batch["rewards"],
                (batch["next_observations"] - state_mean) / state_std,
                batch["terminals"],
            )
            if step % config.log_every == 0:
                run.log(step, **losses)
            if step % eval_every == 0 or step == config.steps:
                result = run.evaluate(step, ActorPolicy(agent.actor, state_mean, state_std))
                run.checkpoint(
                    step,
                    {
                        "actor": agent.actor.state_dict(),
                        "state_mean": state_mean,
                        "state_std": state_std,
                        "action_low": action_low,
                        "action_high": action_high,
                        "hidden_dim": config.hidden_dim,
                        "hidden_layers": config.hidden_layers,
                    },
                    load=build_policy,
                )
                print(
                    f"step {step}: {result.metric} {result.score:.1f}, critic loss {losses['critic_loss']:.3f} "
                    f"({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )


def parse_args() -> argparse.Namespace:
    defaults = TD3BCConfig()
    parser = argparse.ArgumentParser(description="TD3+BC on an offbench dataset, tracked as an offbench run directory.")
    parser.add_argument("--dataset", default="pendulum-scripted", help="a registered dataset id or a path")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--steps", type=int, default=defaults.steps, help="gradient steps (the paper: 1M)")
    parser.add_argument(
        "--eval-every", type=int, default=5000, help="steps between evaluations (CORL: 5000; the board's protocol may differ)"
    )
    parser.add_argument("--episodes", type=int, default=10, help="episodes per evaluation (CORL: 10)")
    parser.add_argument("--alpha", type=float, default=defaults.alpha, help="weight of Q against the BC term (the paper: 2.5)")
    parser.add_argument("--discount", type=float, default=defaults.discount, help="the critic's discount (the paper: 0.99)")
    parser.add_argument("--log-every", type=int, default=defaults.log_every, help="steps between metrics.jsonl lines")
    parser.add_argument("--out", default="runs", help="folder the run directory is made in")
    parser.add_argument("--name", default=None, help="the run directory's name (default: td3-bc-<dataset>-s<seed>-<time>)")
    return parser.parse_args()


if __name__ == "__main__":
    args = parse_args()
    train(
        TD3BCConfig(seed=args.seed, steps=args.steps, alpha=args.alpha, discount=args.discount, log_every=args.log_every),
        args.dataset,
        args.out,
        args.name,
        args.episodes,
        args.eval_every,
    )
