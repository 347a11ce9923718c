"""The generators' inner loop compiled (numba), for the tabular epsilon-greedy sources: Q-learning and AD-epsilon.

`rollout.run_group` steps all rows of a group with whole-array NumPy calls: about 18 calls per step, which at a
few hundred rows cost ~40 us a step (~150 ns per row-step), almost all of it call overhead. Here one call runs a
span of steps of every row, row after row, in machine code (~30 ns per row-step on the machine measured, bound
by the serial chain of table lookups and branches of one learner). It makes the same float64 operations in the
same order (no fast-math, so no reordering or fused multiply-adds) and takes its random numbers from the same
blocks of draws (`EpsilonGreedy`'s, drawn by NumPy), so the data are the same bytes as the NumPy loop's (tested
for both sources, in lockstep and with episodes that end early).

numba is optional (the `fast` extra, part of `all`): without it, or with OFFBENCH_GENERATOR_LOOP=numpy, the NumPy
loop runs; by default numba runs only for jobs large enough to repay its start (`selected_loop`). The loop is
compiled on first use and cached on disk (numba's `cache=True`); `compile_loop()` is called in the parent
before the worker processes fork, so they inherit the compiled code instead of each compiling it again.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Callable

import numpy as np

from offbench.errors import OffbenchError
from offbench.generators.sources import ADEpsilon, QLearning

LOOPS = ("numba", "numpy")  # what OFFBENCH_GENERATOR_LOOP may name
# When the compiled loop repays numba's start (measured on the 2-core machine this was written on): numba takes
# ~1 s to start in a fresh process (0.3-0.55 s import, 0.5-0.7 s loading the cached loop); the NumPy loop costs
# ~40 us per step of a group (its ~18 calls, whatever the rows), the compiled loop ~30 ns per history-step.
NUMBA_START_S, NUMPY_STEP_S, COMPILED_HISTORY_STEP_S = 1.0, 40e-6, 30e-9


def selected_loop(group_steps: int | None = None, history_steps: int = 0) -> str:
    """The inner loop generation uses: OFFBENCH_GENERATOR_LOOP if set, else numba where installed and the job is
    large enough to repay its start: groups of `group_steps` steps holding `history_steps` history-steps each
    (None: any size). Both loops give the same bytes."""
    name = os.environ.get("OFFBENCH_GENERATOR_LOOP", "").strip().lower()
    installed = importlib.util.find_spec("numba") is not None
    if name and name not in LOOPS:
        raise OffbenchError(f"OFFBENCH_GENERATOR_LOOP must be one of {', '.join(LOOPS)} (got {name!r})")
    if name == "numba" and not installed:
        raise OffbenchError("OFFBENCH_GENERATOR_LOOP=numba, but numba is not installed (pip install 'offbench[fast]')")
    saved = None if group_steps is None else group_steps * NUMPY_STEP_S - history_steps * COMPILED_HISTORY_STEP_S
    return name or ("numba" if installed and (saved is None or saved > NUMBA_START_S) else "numpy")


def _first_argmax(q: np.ndarray, s: int) -> int:
    """argmax of q[s] (the first of equal maxima, as np.argmax)."""
    best, value = 0, q[s, 0]
    for a in range(1, q.shape[1]):
        if q[s, a] > value:
            best, value = a, q[s, a]
    return best


def _span_loop(
    n,
    horizon,
    num_episodes,
    step0,
    state,
    start,
    t,
    episode,
    finished_at,
    sa_log,
    ended_log,
    logged,
    u,
    random_actions,
    drawn,
    epsilons,
    q,
    policy,
    learn,
    next_flat,
    rewards_flat,
    terminal_flat,
    lr,
    gamma,
):
    """n steps of every row, the next being step step0 of the group: act epsilon-greedy (on the Q-table, or on
    the fixed policy where not `learn`), move, and with `learn` make the Q-learning update. Logs row r's steps
    in sa_log[r, logged + i] (flat state-action index) and ended_log (episode ended there); u and
    random_actions (rows, block of draws) hold the draws from column `drawn` on. Per row: state, t and
    episode (updated in place), the nominal step episode * horizon + t choosing epsilon (rows past their
    history run on, clipped to the schedule), finished_at: the group step after its last episode ended (0
    while it has not). Row after row: a row's tables stay in cache for its whole span, and logs and draws
    are read and written in sequence. (Written as one loop on purpose: a helper function returning a tuple
    made numba's code twice as slow.)"""
    last = len(epsilons) - 1
    num_actions = q.shape[1]
    for r in range(state.shape[0]):
        s, tr, er = state[r], t[r], episode[r]
        for i in range(n):
            if u[r, drawn + i] < epsilons[min(er * horizon + tr, last)]:
                a = random_actions[r, drawn + i]
            else:
                a = _greedy(q, s) if learn else policy[s]
            sa = s * num_actions + a
            next_state = next_flat[sa]
            terminated = terminal_flat[sa]
            if learn:
                best_next = 0.0 if terminated else q[next_state, _greedy(q, next_state)]
                target = rewards_flat[sa] + gamma * best_next
                current = q[s, a]
                q[s, a] = current + lr * (target - current)
            sa_log[r, logged + i] = sa
            s = next_state
            tr += 1
            ended = tr == horizon or terminated
            ended_log[r, logged + i] = ended
            if ended:
                s, tr, er = start[r], 0, er + 1
                if er == num_episodes:
                    finished_at[r] = step0 + i + 1
        state[r], t[r], episode[r] = s, tr, er


# The argmax _span_loop calls: numba's compiled _first_argmax from kernel() on, the Python one until then
_greedy: Callable[[np.ndarray, int], int] = _first_argmax
_span = None  # numba's compiled _span_loop, made on first use (see kernel())


def kernel():
    """The compiled `_span_loop`. numba is imported here, not with the module: its import alone takes ~0.4 s,
    which only generation should pay."""
    global _greedy, _span
    if _span is None:
        import numba

        _greedy = numba.njit(cache=True, inline="always")(_first_argmax)  # the name _span_loop calls
        _span = numba.njit(cache=True)(_span_loop)
    return _span


class CompiledEpsilonGreedy:
    """A Q-learning or AD-epsilon source of a group run by the compiled loop: its tables and its draws. The
    draws come block by block from the source's own `EpsilonGreedy`, in its order, so the random streams
    are consumed exactly as by the NumPy loop."""

    def __init__(self, env, algo):
        self.explore = algo.explore
        self.epsilons = np.ascontiguousarray(algo.explore.epsilons, dtype=np.float64)
        self.learn = isinstance(algo, QLearning)
        if self.learn:
            self.q, self.policy = algo.q, np.zeros(1, dtype=np.int64)
            self.lr, self.gamma = float(algo.config.learning_rate), float(algo.config.gamma)
        else:
            assert isinstance(algo, ADEpsilon)
            # no table to learn: q only carries the number of actions
            self.q, self.policy = np.zeros((1, env.num_actions)), np.ascontiguousarray(algo.policy, dtype=np.int64)
            self.lr = self.gamma = 0.0

    def draws(self) -> tuple[np.ndarray, np.ndarray]:
        """The next block's uniforms and random actions, rows first (rows, RowStreams.BLOCK_STEPS), as EpsilonGreedy draws them."""
        return self.explore.uniforms(rows_first=True), self.explore.random_actions(rows_first=True)

    def tables(self, next_flat, rewards_flat, terminal_flat) -> tuple:
        """The loop's arguments after the draws: the source's schedule and tables, then the environment's (flat
        next state, reward and termination of every flat state-action index)."""
        return (
            self.epsilons,
            self.q,
            self.policy,
            self.learn,
            np.ascontiguousarray(next_flat, dtype=np.int64),
            np.ascontiguousarray(rewards_flat),
            np.ascontiguousarray(terminal_flat, dtype=np.bool_),
            self.lr,
            self.gamma,
        )


def compiled_source(env, algo, loop: str) -> CompiledEpsilonGreedy | None:
    """The compiled form of the group's source, or None where the NumPy loop must run (`loop` is not "numba",
    a source other than Q-learning and AD-epsilon, or rewards with noise drawn at each step)."""
    if loop != "numba" or not isinstance(algo, (QLearning, ADEpsilon)) or hasattr(env, "noisy_rewards"):
        return None
    return CompiledEpsilonGreedy(env, algo)


def run_span(
    n, horizon, num_episodes, step0, state, start, t, episode, finished_at, sa_log, ended_log, logged, u, random_actions, drawn, tables
) -> None:
    """The compiled `_span_loop` with the source's tables (`CompiledEpsilonGreedy.tables`)."""
    kernel()(
        n, horizon, num_episodes, step0, state, start, t, episode, finished_at, sa_log, ended_log, logged, u, random_actions, drawn, *tables
    )


def compile_loop() -> None:
    """Compile (or load from numba's cache) the loop on a tiny table, so that worker processes forked
    afterwards start with it compiled."""
    rows, states, actions = 1, 2, 2
    next_flat, rewards, terminal = (
        np.zeros(states * actions, np.int64),
        np.zeros(states * actions, np.float32),
        np.zeros(states * actions, bool),
    )
    u, random_actions = np.ones((rows, 1)), np.zeros((rows, 1), np.int64)
    for learn in (True, False):  # one compiled signature serves both sources
        tables = (np.ones(1), np.zeros((states, actions)), np.zeros(states, np.int64), learn, next_flat, rewards, terminal, 0.1, 0.9)
        state, start, t, episode, finished_at = (np.zeros(rows, np.int64) for _ in range(5))
        run_span(
            1,
            1,
            1,
            0,
            state,
            start,
            t,
            episode,
            finished_at,
            np.empty((rows, 1), np.int64),
            np.empty((rows, 1), bool),
            0,
            u,
            random_actions,
            0,
            tables,
        )
