"""Algorithm Distillation speed: how many updates per second does offbench's `ad` train against AD written the
obvious way, and how much faster does its KV-cached policy act than one that recomputes its context, in one run?

    .venv/bin/python benchmarks/speed/ad_training.py --updates 10 --rounds 3                    # CPU-sized model
    .venv/bin/python benchmarks/speed/ad_training.py --hidden 512 --batch 512 --device cuda     # ad-eps size

Answer: docs/results.md, "Speed", and benchmarks/speed/README.md, "Algorithm Distillation".

Training: the reference is AD written the obvious way: three tokens (s, a, r) per step, `nn.TransformerEncoder`
(pre-LayerNorm, GELU, causal mask) over all 3T tokens, logits read at the s tokens, Adam. offbench's `ad` is
timed at the same sizes in both token layouts ("sar": the same three tokens per step; "step": one token per
step). Dropout is one value everywhere (the reference's layer has a single dropout rate). Every side trains on
the same `ad_windows` batches of darkroom-small (sampling included in the timing); rounds are interleaved
(reference, sar, step, reference, ...) and the ratio is of process CPU time per update (what a shared machine
distorts least), wall time shown too.

Generation: 16 Dark Room tasks stepped for `--episodes` episodes with a context of `--context` steps, the
cached policy against the same policy with `kv_cache = false` (which recomputes the whole context every step);
steps per second of `act` + `observe`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd
import torch
import typer
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.common
import offbench  # noqa: E402
from benchmarks.common import cli_help, machine  # noqa: E402
from offbench.baselines import get_baseline  # noqa: E402
from offbench.data.samplers import make_sampler  # noqa: E402
from offbench.data.spec import DatasetSpec  # noqa: E402
from offbench.envs.benchmarks import card_tasks, make_batch_env  # noqa: E402
from offbench.evaluation.policy import PolicyOptions  # noqa: E402


class ReferenceAD(nn.Module):
    """AD the obvious way: embed s, a, r, interleave, add positions, nn.TransformerEncoder with a causal mask."""

    def __init__(self, num_states: int, num_actions: int, steps: int, embedding: int, hidden: int, layers: int, heads: int, dropout: float):
        super().__init__()
        self.state_embedding = nn.Embedding(num_states, embedding)
        self.action_embedding = nn.Embedding(num_actions, embedding)
        self.reward_embedding = nn.Linear(1, embedding)
        self.project = nn.Linear(embedding, hidden)
        self.positions = nn.Embedding(3 * steps, hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(hidden), enable_nested_tensor=False)
        self.head = nn.Linear(hidden, num_actions)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(3 * steps))

    def forward(self, states: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
        batch, steps = actions.shape
        tokens = torch.stack(
            [self.state_embedding(states), self.action_embedding(actions), self.reward_embedding(rewards.unsqueeze(-1))], dim=2
        )
        x = self.project(tokens.reshape(batch, 3 * steps, -1)) + self.positions.weight[: 3 * steps]
        return self.head(self.encoder(x, mask=self.mask[: 3 * steps, : 3 * steps], is_causal=True)[:, 0::3])


def state_index(observations: torch.Tensor, size: int = 9) -> torch.Tensor:
    return (observations[..., 0] * size + observations[..., 1]).long()


def time_updates(update, sampler, updates: int) -> tuple[float, float]:
    update(sampler.sample())  # warm-up
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(updates):
        update(sampler.sample())
    return (time.process_time() - cpu) / updates, (time.perf_counter() - wall) / updates


def main(
    hidden: int = typer.Option(128, help="transformer width"),
    embedding: int = typer.Option(64, help="token embedding size before the projection"),
    layers: int = typer.Option(4),
    heads: int = typer.Option(4),
    context: int = typer.Option(80, help="steps per window (Dark Room: 4 episodes)"),
    batch: int = typer.Option(64),
    dropout: float = typer.Option(0.1),
    updates: int = typer.Option(20, help="updates per round and side"),
    rounds: int = typer.Option(3),
    episodes: int = typer.Option(10, help="generation: in-context episodes"),
    threads: int = typer.Option(1),
    device: str = typer.Option("cpu"),
) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    store = offbench.load("darkroom-small")
    spec = DatasetSpec.from_store(store)
    dev = torch.device(device)
    cls = get_baseline("ad")
    sizes = dict(
        context_steps=context,
        embedding_dim=embedding,
        hidden_dim=hidden,
        num_layers=layers,
        num_heads=heads,
        attention_dropout=dropout,
        residual_dropout=dropout,
        embedding_dropout=dropout,
    )
    sides = {}
    reference = ReferenceAD(81, spec.action_dim, context, embedding, hidden, layers, heads, dropout).to(dev)
    optimizer = torch.optim.Adam(reference.parameters(), lr=3e-4)

    def reference_update(b):
        logits = reference(state_index(b["observations"]), b["actions"], b["rewards"])
        loss = F.cross_entropy(logits.flatten(0, 1), b["actions"].flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        optimizer.step()

    sides["reference (nn.TransformerEncoder, 3 tokens/step)"] = reference_update
    for layout in ("sar", "step"):
        sides[f"offbench ad, token_layout={layout}"] = cls(cls.Config(token_layout=layout, **sizes), spec, dev).update
    samplers = {name: make_sampler("ad_windows", store, batch, 0, device=device, window_length=context) for name in sides}
    rows = []
    for round_ in range(rounds):
        for name, update in sides.items():
            cpu, wall = time_updates(update, samplers[name], updates)
            rows.append({"side": name, "round": round_, "cpu_s": cpu, "wall_s": wall})
    table = pd.DataFrame(rows).groupby("side", sort=False)[["cpu_s", "wall_s"]].mean()
    base = table.iloc[0]
    table["updates/s (cpu)"] = 1 / table["cpu_s"]
    table["speed-up (cpu)"] = base["cpu_s"] / table["cpu_s"]
    table["speed-up (wall)"] = base["wall_s"] / table["wall_s"]
    print(
        f"training: hidden {hidden}, embedding {embedding}, {layers} layers x {heads} heads, context {context} steps, "
        f"batch {batch}, dropout {dropout}, {rounds} rounds x {updates} updates, {threads} thread(s), {device}"
    )
    print(f"measured {machine()}")
    print(table.round(3).to_markdown())

    _, held_out = card_tasks(store.card)
    goals = (held_out * 16)[:16]
    generation = []
    for layout in ("sar", "step"):
        ad = cls(cls.Config(token_layout=layout, **sizes), spec, dev)
        for kv_cache in (True, False):
            ad.config.kv_cache = kv_cache
            policy = ad.policy(PolicyOptions())
            env = make_batch_env(store.card["env"], goals)
            observations = env.reset()
            policy.reset(env.num_envs)
            cpu, wall = time.process_time(), time.perf_counter()
            steps = episodes * env.horizon
            for _ in range(steps):
                actions = policy.act(observations)
                observations, rewards, terminated, truncated = env.step(actions)
                dones = terminated | truncated
                policy.observe(rewards, dones)
                if dones.any():
                    observations = env.reset(dones)
            generation.append(
                {
                    "layout": layout,
                    "kv_cache": kv_cache,
                    "steps/s (cpu)": steps / (time.process_time() - cpu),
                    "steps/s (wall)": steps / (time.perf_counter() - wall),
                }
            )
    gen = pd.DataFrame(generation)
    for layout in ("sar", "step"):
        part = gen[gen.layout == layout].set_index("kv_cache")
        gen.loc[gen.layout == layout, "speed-up (cpu)"] = (part["steps/s (cpu)"] / part.loc[False, "steps/s (cpu)"]).to_numpy()
    print(
        f"\ngeneration: 16 tasks, {episodes} episodes of 20 steps, context {context} steps (window restarts at {context}, keeps {context // 2})"
    )
    print(gen.round(2).to_markdown(index=False))


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)  # --help: the question, the command and where the answer stands
    typer.run(main)
