"""The Bayes posterior of the best arm that benchmarks/studies/bandit_posterior.py measures AD and DPT against."""

from __future__ import annotations

import numpy as np

from benchmarks.studies.bandit_posterior import BestArmPosterior


def test_one_pull_gives_the_closed_form():
    """Ten U(0, 1) arms, one pull of arm 0: P(arm 0 best) = integral of its Beta(2, 1) or Beta(1, 2) density times
    x^9 = 2/11 after a success and 2/110 after a failure; the other arms share the rest equally."""
    posterior = BestArmPosterior(pulls=1)
    counts = np.zeros((2, 10))
    successes, failures = counts.copy(), counts.copy()
    successes[0, 0], failures[1, 0] = 1, 1
    p = posterior(successes, failures)
    np.testing.assert_allclose(p[:, 0], [2 / 11, 2 / 110], atol=1e-5)
    np.testing.assert_allclose(p[:, 1:], np.repeat((1 - p[:, :1]) / 9, 9, axis=1), atol=1e-9)


def test_matches_sampling_from_the_beta_posteriors():
    """For counts of a long history, the tabled integral equals the frequency with which each arm's Beta sample is
    the largest (Thompson sampling's pull distribution), to within the Monte Carlo error."""
    rng = np.random.default_rng(0)
    failures = rng.integers(0, 8, (1, 10)).astype(float)
    successes = rng.integers(0, 8, (1, 10)).astype(float)
    p = BestArmPosterior(pulls=16)(successes, failures)[0]
    draws = rng.beta(1 + successes[0], 1 + failures[0], (400_000, 10)).argmax(axis=1)
    frequency = np.bincount(draws, minlength=10) / len(draws)
    np.testing.assert_allclose(p, frequency, atol=3e-3)
    assert abs(p.sum() - 1) < 1e-12


def test_arms_pulled_to_the_end_of_the_table_give_a_finite_posterior():
    """A history of 100 successes on each of two arms (a point-mass roll-in can make one): their Beta(101, 1) log
    distribution functions underflow to -inf near 0, which must not turn the posterior into nan. Against sampling."""
    successes, failures = np.zeros((1, 10)), np.zeros((1, 10))
    successes[0, :2] = 100
    p = BestArmPosterior(pulls=100)(successes, failures)[0]
    assert np.isfinite(p).all() and abs(p.sum() - 1) < 1e-12
    draws = np.random.default_rng(0).beta(1 + successes[0], 1 + failures[0], (400_000, 10)).argmax(axis=1)
    np.testing.assert_allclose(p, np.bincount(draws, minlength=10) / len(draws), atol=3e-3)


def test_the_posterior_before_each_pull_counts_only_the_pulls_before_it():
    """Entry t of a history's posteriors reads pulls 0..t-1: uniform before the first, 2/11 on arm 0 after its
    success, then the posterior of one success and one failure on arm 0 after both pulls."""
    from benchmarks.studies.bandit_posterior import best_arm_posteriors

    p = best_arm_posteriors(np.array([[0, 0]]), np.array([[1.0, 0.0]]), arms=10)[0]
    assert p.shape == (3, 10)
    np.testing.assert_allclose(p[0], np.full(10, 0.1), atol=1e-9)
    np.testing.assert_allclose(p[1, 0], 2 / 11, atol=1e-5)
    expected = BestArmPosterior(pulls=2)(np.eye(10)[:1], np.eye(10)[:1])[0]
    np.testing.assert_allclose(p[2], expected, atol=1e-12)
