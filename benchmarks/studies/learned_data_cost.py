"""What does learned-agent multi-task data (generators "minigrid-learned" and "metaworld-learned") cost per task:
training steps per CPU-second on one core (PPO on MiniGrid, SAC on Meta-World), and the steps and CPU-seconds until
a checkpoint reaches the medium band? Trains each task as the recipes do, stopping at the band or at a step budget,
and times it.

    .venv/bin/python benchmarks/studies/learned_data_cost.py --budget 196608 --checkpoint-every 16384
    .venv/bin/python benchmarks/studies/learned_data_cost.py --generator metaworld-learned --tasks reach-v3,push-v3 \
        --budget 60000 --checkpoint-every 10000 --eval-episodes 10 --episodes 100

Answer: benchmarks/studies/minigrid-learned-data.md (MiniGrid) and benchmarks/studies/metaworld-learned-data.md
(Meta-World).

Times are CPU-seconds of this one-threaded process (`time.process_time`), so a loaded machine slows the wall
clock but not the figures much. Per task: training rate (steps per CPU-second, learning included), the
evaluation cost per checkpoint, the checkpoints' success, the steps and CPU-seconds to the first checkpoint at
or above the band's lower edge, and the mean evaluation episode length there, from which the cost of playing the
medium data's episodes is estimated.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from offbench.generators.learned_tasks import LearnedRecipe, TaskAgent, train
from offbench.generators.torch_threads import one_torch_thread

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.common import cli_help, print_table  # noqa: E402

app = typer.Typer(add_completion=False)


def recipe_for(generator: str, name: str, params: dict) -> LearnedRecipe:
    """The generator's recipe for one task of its default suite (MiniGrid MT7, Meta-World MT10)."""
    if generator == "minigrid-learned":
        from offbench.generators.minigrid_learned import learned_recipe

        return learned_recipe({"suite": "MT7", "tasks": [name], **params}, 0)
    if generator == "metaworld-learned":
        from offbench.generators.metaworld_learned import learned_recipe

        return learned_recipe({"suite": "MT10", "tasks": [name], **params}, 0)
    raise typer.BadParameter(f"unknown generator {generator!r}: minigrid-learned or metaworld-learned")


def default_tasks(generator: str) -> list[str]:
    if generator == "metaworld-learned":
        from offbench.envs.metaworld import suite_tasks

        return suite_tasks("MT10")
    from offbench.envs.minigrid import suite_tasks

    return suite_tasks("MT7")


class Clock:
    """CPU-seconds spent in the methods it wraps, and the evaluation steps played."""

    def __init__(self, agent: TaskAgent):
        self.train = self.play = 0.0
        self.played_steps = 0
        self.last_mean_length = 0.0
        learn, play = agent.model.learn, agent.play

        def timed_learn(*args, **kwargs):
            start = time.process_time()
            try:
                return learn(*args, **kwargs)
            finally:
                self.train += time.process_time() - start

        def timed_play(*args, **kwargs):
            start = time.process_time()
            results = play(*args, **kwargs)
            self.play += time.process_time() - start
            self.played_steps += sum(result["length"] for result in results)
            self.last_mean_length = sum(result["length"] for result in results) / len(results)
            return results

        agent.model.learn, agent.play = timed_learn, timed_play


@app.command()
def main(
    generator: str = typer.Option("minigrid-learned", help="minigrid-learned (PPO) | metaworld-learned (SAC)."),
    tasks: str = typer.Option("", help="Comma-separated task ids (default: MiniGrid MT7's or Meta-World MT10's)."),
    budget: int = typer.Option(196608, help="The most training steps per task."),
    checkpoint_every: int = typer.Option(16384, help="Training steps between checkpoints."),
    eval_episodes: int = typer.Option(50, help="Episodes per checkpoint evaluation."),
    band_low: float = typer.Option(0.4, help="Stop at the first checkpoint with at least this success."),
    episodes: int = typer.Option(1000, help="Episodes per task of the medium data, for its estimated playing cost."),
) -> None:
    rows = []
    for name in tasks.split(",") if tasks else default_tasks(generator):
        params = {
            "quality": "medium",
            "timesteps": budget,
            "checkpoint_every": checkpoint_every,
            "eval_episodes": eval_episodes,
            "band": [band_low, 1.0],
            "target_success": band_low,
        }
        with one_torch_thread():  # as the generator: the initial weights' float bits depend on torch's threads
            agent = TaskAgent(recipe_for(generator, name, params), 0, record=False)
            clock = Clock(agent)
            checkpoints = train(agent, lambda steps, **values: None)
        agent.close()
        reached = checkpoints[-1].success >= band_low
        steps = checkpoints[-1].timesteps
        play_rate = clock.played_steps / clock.play
        rows.append(
            {
                "task": name,
                f"{agent.learner.algorithm} steps / CPU-s": f"{steps / clock.train:.0f}" if steps else "-",
                "eval CPU-s / checkpoint": f"{clock.play / len(checkpoints):.1f}",
                "success at checkpoints": " ".join(f"{c.success:.2f}" for c in checkpoints),
                "steps to band": f"{steps:,}" if reached else f"> {steps:,}",
                "CPU-s to band": f"{clock.train + clock.play:.0f}" if reached else f"> {clock.train + clock.play:.0f}",
                f"play {episodes} episodes, CPU-s": f"{episodes * clock.last_mean_length / play_rate:.0f}",
            }
        )
        print(rows[-1], flush=True)  # a long study shows each task as it ends
    print_table(
        rows,
        f"{generator}: one core per task, checkpoints every {checkpoint_every:,} steps, "
        f"{eval_episodes} evaluation episodes, band from {band_low}",
    )


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)  # --help: the question, the command and where the answer stands
    app()
