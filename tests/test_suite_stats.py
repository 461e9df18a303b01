"""The suite's aggregate numerics (`gazelle.suite.stats`) against slow references written
from the definitions of Agarwal et al. 2021, plus properties."""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import pytest

from gazelle.suite.stats import iqm, median_of_means, stratified_bootstrap_ci


def slow_iqm(per_game):
    """Mean of the middle half of all scores, one by one: sort, skip floor(n/4) each end."""
    scores = sorted(float(s) for game in per_game for s in game)
    cut = len(scores) // 4
    middle = scores[cut : len(scores) - cut]
    return sum(middle) / len(middle)


def slow_median_of_means(per_game):
    return statistics.median(sum(game) / len(game) for game in per_game)


def slow_bootstrap_ci(per_game, statistic, reps, confidence, seed):
    """The same draws as the vectorised version (one [reps, n] block per game, games in
    order), then each replicate one at a time, and the quantiles by sorting."""
    rng = np.random.default_rng(seed)
    draws = [rng.integers(0, len(game), size=(reps, len(game))) for game in per_game]
    values = sorted(
        statistic([[per_game[g][i] for i in draws[g][rep]] for g in range(len(per_game))])
        for rep in range(reps)
    )
    tail = (1 - confidence) / 2

    def quantile(q):  # linear interpolation between order statistics, numpy's default
        position = q * (reps - 1)
        low = int(np.floor(position))
        high = min(low + 1, reps - 1)
        return values[low] + (values[high] - values[low]) * (position - low)

    return quantile(tail), quantile(1 - tail)


def test_iqm_and_median_against_the_definitions():
    rng = np.random.default_rng(3)
    for seeds, games in [(1, 1), (2, 5), (3, 4), (5, 3), (7, 2)]:
        per_game = [list(rng.normal(50, 30, size=seeds)) for _ in range(games)]
        assert iqm(per_game) == pytest.approx(slow_iqm(per_game))
        assert median_of_means(per_game) == pytest.approx(slow_median_of_means(per_game))


def test_iqm_by_hand():
    assert iqm([[1, 2, 3, 4], [5, 6, 7, 8]]) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert iqm([[10.0], [0.0], [1.0], [2.0], [3.0]]) == pytest.approx(2.0)  # drops 0 and 10
    # games with different seed counts (a failed seed): scores pooled
    assert iqm([[1.0, 100.0], [2.0], [3.0]]) == pytest.approx(2.5)


def test_median_of_five_scores():
    assert median_of_means([[3.0], [1.0], [50.0], [2.0], [-7.0]]) == 2.0
    assert median_of_means([[1.0, 3.0], [10.0], [0.0, 0.0]]) == 2.0  # means 2, 10, 0


def test_a_constant_gives_that_constant():
    per_game = [[7.5] * 3 for _ in range(5)]
    assert iqm(per_game) == 7.5
    assert median_of_means(per_game) == 7.5
    for statistic in (iqm, median_of_means):
        assert stratified_bootstrap_ci(per_game, statistic, reps=200) == (7.5, 7.5)


def test_the_bootstrap_against_a_slow_reference():
    per_game = [[1.0, 4.0, 2.5], [30.0, 10.0], [-3.0, 0.5, 2.0, 8.0]]
    for statistic, slow in ((iqm, slow_iqm), (median_of_means, slow_median_of_means)):
        fast = stratified_bootstrap_ci(per_game, statistic, reps=500, confidence=0.9, seed=4)
        assert fast == pytest.approx(slow_bootstrap_ci(per_game, slow, 500, 0.9, 4))


def test_the_bootstrap_resamples_within_each_game_only():
    """One game of two seeds: its 4 equally likely resamples have means a, (a+b)/2 twice and
    b; a wide interval spans from a to b. A second game with one seed never changes."""
    low, high = stratified_bootstrap_ci([[0.0, 10.0]], median_of_means, reps=4000, seed=1)
    assert (low, high) == (0.0, 10.0)
    means = {np.mean(pair) for pair in itertools.product([0.0, 10.0], repeat=2)}
    assert means == {0.0, 5.0, 10.0}
    # the median of the game means (x, 100, 200) is 100 whatever x resamples to
    ci = stratified_bootstrap_ci([[0.0, 10.0], [100.0], [200.0]], median_of_means, reps=500)
    assert ci == (100.0, 100.0)


def test_the_interval_holds_the_point_estimate_and_narrows_with_seeds():
    rng = np.random.default_rng(0)
    widths = []
    for seeds in (3, 30):
        per_game = [list(rng.normal(mu, 10, size=seeds)) for mu in (0, 20, 50, 80, 120)]
        for statistic in (iqm, median_of_means):
            low, high = stratified_bootstrap_ci(per_game, statistic, reps=2000)
            assert low <= float(statistic(per_game)) <= high
        low, high = stratified_bootstrap_ci(per_game, iqm, reps=2000)
        widths.append(high - low)
    assert widths[1] < 0.75 * widths[0]


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        iqm([])
    with pytest.raises(ValueError):
        median_of_means([[1.0], []])
    with pytest.raises(ValueError):
        stratified_bootstrap_ci([[1.0]], iqm, confidence=1.0)
