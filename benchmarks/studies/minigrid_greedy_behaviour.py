"""Why do the multi-task methods score far below the learning agents' MiniGrid data? The data's behaviour policy is
a PPO checkpoint that samples its actions; the methods act greedily (the most likely action). This plays each task's
acting checkpoint both ways on the same fresh layouts.

    .venv/bin/python benchmarks/studies/minigrid_greedy_behaviour.py minigrid/mt7-medium --episodes 100

Answer: benchmarks/studies/minigrid-learned-data.md, "Greedy imitation of a sampling agent".

The card's PPO runs must be on this machine (`offbench download CARD` makes them, under $OFFBENCH_HOME/work). The
layouts are seeds 10,000 + e, none of which the data or the checkpoint's evaluation played.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import typer

from offbench.data.cards import get_card
from offbench.envs.multitask import Lane
from offbench.errors import OffbenchError
from offbench.evaluation.lanes import run_lanes
from offbench.generators.learned_tasks import ROUND, TaskAgent, TaskRun, choose_checkpoint, run_path
from offbench.generators.minigrid_learned import SampledPolicy, learned_recipe
from offbench.generators.torch_threads import one_torch_thread

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.common import cli_help, print_table  # noqa: E402

app = typer.Typer(add_completion=False)
FRESH_SEEDS = 10_000


class GreedyPolicy(SampledPolicy):
    """The same network's most likely action, what a greedy imitation of the data converges to at best."""

    def act(self, observations: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            probs = self.network.get_distribution(torch.as_tensor(observations, dtype=torch.float32)).distribution.probs
        return probs.argmax(dim=1).numpy().astype(np.int64)


@app.command()
def main(
    card_id: str = typer.Argument(..., help="A minigrid-learned card (medium or replay) whose runs are on this machine."),
    episodes: int = typer.Option(100, help="Fresh layouts per task, played by each policy."),
) -> None:
    card = get_card(card_id)
    if card.source is None or card.source.recipe is None or card.source.recipe.generator != "minigrid-learned":
        raise OffbenchError(f"{card_id}: not a minigrid-learned card")
    recipe = learned_recipe(dict(card.source.recipe.params), card.source.recipe.seed)
    rows = []
    with one_torch_thread():
        for task_id, name in enumerate(recipe.names):
            path = run_path(recipe, task_id)
            if not path.is_file():
                raise OffbenchError(f"{path}: no PPO run of {name} on this machine (offbench download {card_id} makes it)")
            run = TaskRun.from_bytes(path.read_bytes())
            acting = choose_checkpoint(list(run.success), "medium", recipe.params.target_success)
            agent = TaskAgent(recipe, task_id, record=False)
            agent.model.policy.load_state_dict(run.weights[acting])
            lanes = [Lane(task_id, e, FRESH_SEEDS + e) for e in range(episodes)]
            played = {
                label: run_lanes(
                    agent.pool,
                    lanes,
                    lambda round_lanes, envs, cls=cls, network=agent.model.policy: cls(network, round_lanes),
                    ROUND,
                    False,
                )
                for label, cls in (("sampled", SampledPolicy), ("greedy", GreedyPolicy))
            }
            agent.close()
            rows.append(
                {
                    "task": name.removeprefix("MiniGrid-"),
                    "acting checkpoint (steps)": f"{int(run.timesteps[acting]):,}",
                    "its success when chosen": f"{run.success[acting]:.2f}",
                    **{f"{label} success": f"{np.mean([r['success'] for r in results]):.2f}" for label, results in played.items()},
                    **{f"{label} mean length": f"{np.mean([r['length'] for r in results]):.0f}" for label, results in played.items()},
                }
            )
            print(rows[-1], flush=True)
    print_table(rows, f"{card_id}: each task's acting PPO checkpoint, sampled against greedy, {episodes} fresh layouts per task")


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)
    app()
