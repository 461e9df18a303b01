"""Aggregate scores of a suite over games and seeds, and how sure they are.

Agarwal, Schwarzer, Castro, Courville and Bellemare, "Deep Reinforcement Learning at the Edge
of the Statistical Precipice" (NeurIPS 2021): with few seeds per game, report the median and
the interquartile mean (IQM) of the human-normalised scores, each with a 95% confidence
interval from a stratified bootstrap (runs resampled with replacement within each game). The
definitions follow the paper's library (`rliable`): the median is taken over games of each
game's mean over seeds; the IQM pools every (game, seed) score and averages the middle half
(`floor(n / 4)` scores cut from each end, as `scipy.stats.trim_mean(x, 0.25)`); the interval
is the percentile interval of the bootstrap replicates.

Scores are given per game as arrays whose last axis is the seeds; games may hold different
numbers of seeds (a failed seed has no score). Leading axes are batch axes: the bootstrap
evaluates every replicate at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

#: A statistic of per-game scores `[..., seeds_g]` -> `[...]`.
Statistic = Callable[[Sequence[np.ndarray]], np.ndarray]


def _games(per_game: Sequence[ArrayLike]) -> list[np.ndarray]:
    games = [np.asarray(scores, dtype=np.float64) for scores in per_game]
    if not games or any(g.ndim == 0 or g.shape[-1] == 0 for g in games):
        raise ValueError("every game needs at least one score, and there must be a game")
    return games


def median_of_means(per_game: Sequence[ArrayLike]) -> np.ndarray:
    """Median over games of each game's mean over seeds: `[..., seeds_g]` per game -> `[...]`."""
    games = _games(per_game)
    return np.median(np.stack([g.mean(axis=-1) for g in games], axis=-1), axis=-1)


def iqm(per_game: Sequence[ArrayLike]) -> np.ndarray:
    """Interquartile mean of all (game, seed) scores pooled: sort the `n` scores, drop
    `floor(n / 4)` from each end, average the rest. `[..., seeds_g]` per game -> `[...]`."""
    pooled = np.sort(np.concatenate(_games(per_game), axis=-1), axis=-1)
    n = pooled.shape[-1]
    cut = n // 4
    return pooled[..., cut : n - cut].mean(axis=-1)


def stratified_bootstrap_ci(
    per_game: Sequence[ArrayLike],
    statistic: Statistic,
    reps: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile confidence interval of `statistic` by stratified bootstrap (Agarwal et
    al. 2021): each replicate redraws, for every game on its own, as many seeds as it has,
    with replacement, from that game's scores; the interval is the `(1 - confidence) / 2`
    and `(1 + confidence) / 2` quantiles of the `reps` replicates' statistic.

    Args:
        per_game: per game, its scores over seeds `[seeds_g]`.
        statistic: `median_of_means`, `iqm` or any function of the same form.
        reps: bootstrap replicates.
        confidence: the interval's coverage, in (0, 1).
        seed: of the resampling generator, so that a report is reproducible.
    """
    if not 0.0 < confidence < 1.0 or reps < 1:
        raise ValueError(f"need 0 < confidence < 1 and reps >= 1, got {confidence}, {reps}")
    rng = np.random.default_rng(seed)
    replicates = []
    for scores in _games(per_game):
        if scores.ndim != 1:
            raise ValueError(f"per-game scores must be 1-D [seeds], got shape {scores.shape}")
        # why: within this game only (the stratum): the games themselves are not resampled
        replicates.append(scores[rng.integers(0, scores.shape[0], size=(reps, scores.shape[0]))])
    values = statistic(replicates)  # [reps]
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)
