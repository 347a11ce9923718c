"""`offbench quickstart`: the main job end to end on a small default, in a couple of minutes on a laptop CPU.

It walks the whole data flow once, printing what each step did:
generate a learning-history dataset and sample every batch kind from it, train and evaluate a
baseline on a small continuous-control dataset (tracked run directories), submit the runs to a
leaderboard and render its table, and draw the figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from rich.console import Console

console = Console(soft_wrap=True)

HISTORY_DATASET = "darkroom-small"
CONTROL_DATASET = "pendulum-scripted"
BENCHMARK = "pendulum-scripted"  # leaderboards/pendulum-scripted: its protocol is what the runs below follow


def _step(title: str) -> None:
    console.rule(f"[bold]{title}", align="left")


def sample_learning_histories(out: Path) -> Path:
    """Generate (first use) the small Dark Room histories, sample each batch kind, plot the source curve."""
    import offbench
    from offbench.data.samplers import make_sampler
    from offbench.data.store import EpisodeStore
    from offbench.plotting.histories import plot_learning_histories

    store = cast(EpisodeStore, offbench.load(HISTORY_DATASET))  # generated histories are native, never a file read in place
    learning = store.card.get("learning", {})
    console.print(
        f"{HISTORY_DATASET}: {store.num_episodes:,} episodes, {store.num_transitions:,} transitions, "
        f"{len(set(store.columns['history_id'].tolist()))} learning histories; "
        f"source return {learning.get('first_return', float('nan')):.2f} -> {learning.get('last_return', float('nan')):.2f} "
        f"(optimum {learning.get('optimal_return', float('nan')):.2f})",
        highlight=False,
    )
    sampler_options: tuple[tuple[str, dict[str, Any]], ...] = (  # each kind's own options (make_sampler's **opts)
        ("transitions", {}),
        ("segments", {"segment_length": 20}),
        ("ad_windows", {"window_length": 80}),
        ("dpt", {"context_size": 40}),
    )
    for kind, options in sampler_options:
        batch = make_sampler(kind, store, batch_size=32, seed=0, **options).sample()
        shapes = ", ".join(f"{key} {tuple(value.shape)}" for key, value in batch.items())
        console.print(f"  {kind:<11} batch: {shapes}", highlight=False)
    figure = plot_learning_histories(store, out / "darkroom-source-learning-curve.png", card=store.card)
    console.print(f"  source learning curve: {figure}", highlight=False)
    return figure


def train_baselines(out: Path, seeds: tuple[int, ...], steps: int) -> list[Path]:
    """Train BC on the pendulum data for each seed; each run is a tracked run directory."""
    from offbench.training.trainer import start_run

    run_dirs = []
    for seed in seeds:
        run = start_run(
            "bc",
            CONTROL_DATASET,
            seed=seed,
            steps=steps,
            out=out / "runs",
            name=f"bc-{CONTROL_DATASET}-s{seed}",
            overrides=[f"checkpoint_every={steps}"],
        )
        summary = run.train()
        final = summary["final"]
        console.print(
            f"  bc seed {seed}: {steps} updates, final normalised score {final['normalized_score']:.1f} "
            f"(mean return {final['mean_return']:.1f}); run directory {run.run_dir}",
            highlight=False,
        )
        run_dirs.append(run.run_dir)
    return run_dirs


def submit_and_render(out: Path, run_dirs: list[Path]) -> None:
    """Submit the runs to a private copy of the pendulum-scripted benchmark, show and render its table."""
    import tomllib

    import tomli_w

    from offbench.leaderboard.commands import show
    from offbench.leaderboard.spec import leaderboards_root, load_spec, without_pins
    from offbench.leaderboard.submit import submit

    root = out / "leaderboards"
    (root / BENCHMARK).mkdir(parents=True)
    # the board's own rules, but checked against this machine's copy of the data: the public board pins the checksum
    # of the copy its entries were made from, which a machine with other SIMD kernels does not generate bit for bit
    board = without_pins(tomllib.loads((leaderboards_root() / BENCHMARK / "benchmark.toml").read_text()))
    (root / BENCHMARK / "benchmark.toml").write_text(tomli_w.dumps(board))
    spec = load_spec(BENCHMARK, root)
    for entry in submit(spec, run_dirs, verify=True):  # each run replayed from its checkpoint: the rows read verified
        console.print(f"  accepted: {entry}", highlight=False)
    show(BENCHMARK, runs=None, root=root, format="table")
    figures = sorted((spec.folder / "figures").glob("*"))
    console.print(f"  rendered: {spec.folder / 'README.md'}, {spec.folder / 'index.html'}", highlight=False)
    for figure in figures:
        console.print(f"  figure: {figure}", highlight=False)


def quickstart(out: Path, seeds: tuple[int, ...] = (0, 1, 2), steps: int = 1_000) -> None:
    from offbench.errors import OffbenchError
    from offbench.utils import ensure_dir

    out = Path(out)
    if out.is_dir() and any(out.iterdir()):
        raise OffbenchError(f"{out}: already exists and is not empty; pass another --out")
    ensure_dir(out)
    _step(f"1. In-context RL data: {HISTORY_DATASET} (generated from its recipe card on first use)")
    sample_learning_histories(out)
    _step(f"2. Train and evaluate BC on {CONTROL_DATASET} ({len(seeds)} seeds, {steps} updates each)")
    run_dirs = train_baselines(out, seeds, steps)
    _step(f"3. Submit the runs to the {BENCHMARK} leaderboard (validated), show the table, render page and figures")
    submit_and_render(out, run_dirs)
    console.print(f"\nDone. Everything is under {out}", highlight=False)
