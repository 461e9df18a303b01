"""Human-normalised scores (`gazelle.envs.scores`): tables, formula, caps, aggregates."""

from __future__ import annotations

import numpy as np
import pytest

from gazelle.envs import (
    ATARI57,
    DMLAB30,
    atari_aggregate,
    compute_human_normalized_score,
    per_level_scores,
    table_for,
)
from gazelle.envs.dmlab30 import TEST_LEVELS, TRAIN_LEVELS
from gazelle.envs.scores import mean_level_return

# IMPALA paper (Espeholt et al., 2018), appendix: per-game returns of IMPALA on Atari-57
# (no-op starts), in the alphabetical order of ATARI57. The paper reports a median
# human-normalised score of 191.8% (deep) and 93.2% (shallow).
IMPALA_DEEP = [
    15962.10, 1554.79, 19148.47, 300732.00, 108590.05, 849967.50, 1223.15, 20885.00,
    32463.47, 1852.70, 59.92, 99.96, 787.34, 11049.75, 28255.00, 136950.00, 185203.00,
    132826.98, -0.33, 0.00, 44.85, 0.00, 317.75, 66782.30, 359.50, 33730.55, 3.48, 601.50,
    1632.00, 8147.40, 43375.50, 0.00, 7342.32, 21537.20, 210996.45, -1.66, 20.98, 98.50,
    351200.12, 29608.05, 57121.00, 12.96, 1753.20, -10180.38, 2365.00, 43595.78, 200625.00,
    7.56, 0.55, 48481.50, 292.11, 332546.75, 0.00, 572898.27, 9157.50, 84231.14, 32935.50,
]  # fmt: skip
IMPALA_SHALLOW = [
    1536.05, 497.62, 12086.86, 29692.50, 3508.10, 773355.50, 1200.35, 13015.00, 8219.92,
    888.30, 35.73, 96.30, 640.43, 5528.13, 5012.00, 136211.50, 58718.25, 107264.73, -0.35,
    0.00, 32.08, 0.00, 269.65, 1002.40, 211.50, 33853.15, -5.25, 440.00, 47.00, 9247.60,
    42259.00, 0.00, 6501.71, 6049.55, 33068.15, -11.14, 20.40, 92.42, 18901.25, 17401.90,
    37505.00, 2.30, 1716.90, -29975.00, 2368.40, 1726.28, 69139.00, -8.13, -1.89, 6617.50,
    267.82, 273058.10, 0.00, 228642.52, 4203.00, 80530.13, 1148.50,
]  # fmt: skip


def _games() -> list[str]:
    return sorted(ATARI57.scores)


def test_tables_complete() -> None:
    assert len(ATARI57.scores) == 57 and len(DMLAB30.scores) == 30
    assert set(DMLAB30.scores) == set(TEST_LEVELS)
    assert ATARI57.scores["pong"] == (-20.7, 14.6)
    assert DMLAB30.scores["rooms_watermaze"] == (4.065, 54.0)
    for random, human in [*ATARI57.scores.values(), *DMLAB30.scores.values()]:
        assert human > random


@pytest.mark.parametrize(("per_game", "median"), [(IMPALA_DEEP, 191.8), (IMPALA_SHALLOW, 93.2)])
def test_reproduces_impala_atari_medians(per_game: list[float], median: float) -> None:
    returns = {game: [value] for game, value in zip(_games(), per_game, strict=True)}
    result = atari_aggregate(returns, require_all=True)
    assert result["median"] == pytest.approx(median, abs=0.05)
    assert result["mean"] > result["median"]


def test_formula_by_hand() -> None:
    # pong: random -20.7, human 14.6 -> mean 0.0 scores 100 * 20.7 / 35.3.
    scores = per_level_scores({"pong": [-1.0, 1.0]}, table=ATARI57)
    assert scores == {"pong": pytest.approx(100 * 20.7 / 35.3)}
    # breakout: (30.5 - 1.7) is 100%; twice the gap above random is 200%.
    assert ATARI57.normalize("breakout", 1.7 + 2 * 28.8) == pytest.approx(200.0)
    assert ATARI57.normalize("breakout", 1.7) == pytest.approx(0.0)


def test_cap_and_mean_dmlab() -> None:
    watermaze_human = {"rooms_watermaze": [54.0 + 2 * (54.0 - 4.065)]}  # 300%
    random_level = {"rooms_keys_doors_puzzle": [4.135]}  # 0%
    returns = {**watermaze_human, **random_level}
    assert compute_human_normalized_score(returns) == pytest.approx(150.0)
    assert compute_human_normalized_score(returns, per_level_cap=100) == pytest.approx(50.0)


def test_dmlab_train_levels_score_against_test_levels() -> None:
    # rooms_collect_good_objects: random 0.073, human 10 (test level's numbers).
    by_train = per_level_scores({"dmlab:rooms_collect_good_objects_train": [10.0]})
    assert by_train == {"rooms_collect_good_objects_test": pytest.approx(100.0)}
    spelled = per_level_scores({"contributed/dmlab30/rooms_watermaze": [4.065]})
    assert spelled == {"rooms_watermaze": pytest.approx(0.0)}


def test_require_all_dmlab30() -> None:
    full = {
        f"dmlab:{train}": [DMLAB30.scores[test][1]]  # the human score: 100% each
        for train, test in zip(TRAIN_LEVELS, TEST_LEVELS, strict=True)
    }
    assert compute_human_normalized_score(full, require_all=True) == pytest.approx(100.0)
    full.pop("dmlab:rooms_watermaze")
    with pytest.raises(ValueError, match="rooms_watermaze"):
        compute_human_normalized_score(full, require_all=True)


def test_atari_spellings() -> None:
    for spelling in ["ALE/MontezumaRevenge-v5", "MontezumaRevengeNoFrameskip-v4",
                     "montezuma_revenge", "MontezumaRevenge"]:  # fmt: skip
        assert ATARI57.canonical(spelling) == "montezuma_revenge"
    assert ATARI57.canonical("ALE/UpNDown-v5") == "up_n_down"
    assert ATARI57.canonical("MsPacman") == "ms_pacman"


def test_table_inferred_from_levels() -> None:
    assert table_for(["ALE/Pong-v5", "breakout"]) is ATARI57
    assert table_for(["dmlab:rooms_watermaze"]) is DMLAB30
    aggregate = atari_aggregate({"ALE/Pong-v5": [14.6], "ALE/Breakout-v5": [1.7], "boxing": [6.1]})
    assert aggregate == {"median": pytest.approx(50.0), "mean": pytest.approx(50.0)}


def test_unknown_level_errors() -> None:
    with pytest.raises(ValueError, match=r"'dmlab:rooms_watermazee'.*rooms_watermaze"):
        compute_human_normalized_score({"dmlab:rooms_watermazee": [1.0]})
    with pytest.raises(ValueError, match="CartPole-v1"):
        compute_human_normalized_score({"CartPole-v1": [1.0]})
    with pytest.raises(ValueError, match="no returns"):
        compute_human_normalized_score({"pong": []})
    with pytest.raises(ValueError, match="no levels"):
        compute_human_normalized_score({})


def test_median_of_even_count_is_midpoint() -> None:
    returns = {"pong": [14.6], "breakout": [30.5], "boxing": [0.1], "freeway": [0.0]}
    result = atari_aggregate(returns)
    assert result["median"] == pytest.approx(50.0)
    assert result["mean"] == pytest.approx(float(np.mean([100, 100, 0, 0])))


def test_both_algorithms_log_the_score_through_telemetry(tmp_path):
    # IMPALA's and A3C's progress rows both take `Telemetry.scores()`.
    from gazelle.algorithms.telemetry import Telemetry
    from gazelle.logging import RunLogger, Timings

    logger = RunLogger(tmp_path, console=False, tensorboard=False)
    telemetry = Telemetry(logger, Timings(), ["PongNoFrameskip-v4", "ALE/Breakout-v5"], 4)
    logger.episode("PongNoFrameskip-v4", 0.0, 100, 100)
    assert telemetry.scores() == {}  # Breakout has no episode yet
    logger.episode("ALE/Breakout-v5", 30.5, 100, 200)
    expected = per_level_scores({"PongNoFrameskip-v4": [0.0], "ALE/Breakout-v5": [30.5]})
    got = telemetry.scores()
    assert got["scores/human_normalized_no_cap"] == pytest.approx(
        float(np.mean(list(expected.values())))
    )
    logger.close()


def test_mean_level_return_is_the_mean_of_each_levels_mean():
    returns = {"a": [1.0, 3.0], "b": [10.0], "c": [-2.0, -2.0, -2.0]}
    assert mean_level_return(returns) == pytest.approx((2.0 + 10.0 - 2.0) / 3)
    with pytest.raises(ValueError, match="every level"):
        mean_level_return({"a": [1.0], "b": []})
