"""Human-normalised scores for Atari-57 and DMLab-30.

A level's score is `100 * (mean_return - random) / (human - random)`: 0 plays like a uniform
random policy, 100 like the reference human tester. Reference numbers:

- Atari-57: the random and human scores used by the DQN, Rainbow and Agent57 papers
  (no-op starts evaluation).
- DMLab-30: the random and human scores of the IMPALA paper's appendix, keyed by the test
  level names; training levels are scored against their test counterparts, as in the seed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gazelle.envs.dmlab30 import LEVEL_MAPPING, short_name


@dataclass(frozen=True)
class ScoreTable:
    """Random and human reference returns per level.

    Attributes:
        name: the suite, for messages.
        scores: level -> `(random, human)` return.
        spelling: turns an accepted spelling of a level (an env spec) into a table key.
        aliases: table key -> the key scored instead (e.g. DMLab-30 train -> test level).
    """

    name: str
    scores: Mapping[str, tuple[float, float]]
    spelling: Callable[[str], str] = str
    aliases: Mapping[str, str] = field(default_factory=dict)

    def canonical(self, level: str) -> str:
        """The table's name for `level`; a ValueError (with close matches) if unknown."""
        key = self.spelling(level)
        key = self.aliases.get(key, key)
        if key not in self.scores:
            close = difflib.get_close_matches(key, list(self.scores), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ValueError(f"no {self.name} reference scores for level {level!r}{hint}")
        return key

    def normalize(self, level: str, mean_return: float) -> float:
        """Human-normalised score (percent) of a mean return on `level`."""
        random, human = self.scores[self.canonical(level)]
        return 100.0 * (mean_return - random) / (human - random)


def _atari_key(level: str) -> str:
    """`ALE/MontezumaRevenge-v5`, `MontezumaRevengeNoFrameskip-v4`, `montezuma_revenge`
    -> `montezuma_revenge`."""
    name = level.split("/")[-1]
    name = re.sub(r"-v\d+$", "", name)
    name = re.sub(r"(NoFrameskip|Deterministic)$", "", name)
    if "_" in name or name.islower():
        return name.lower()
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


_ATARI = {
    "alien": (227.8, 7127.7), "amidar": (5.8, 1719.5), "assault": (222.4, 742.0),
    "asterix": (210.0, 8503.3), "asteroids": (719.1, 47388.7),
    "atlantis": (12850.0, 29028.1), "bank_heist": (14.2, 753.1),
    "battle_zone": (2360.0, 37187.5), "beam_rider": (363.9, 16926.5),
    "berzerk": (123.7, 2630.4), "bowling": (23.1, 160.7), "boxing": (0.1, 12.1),
    "breakout": (1.7, 30.5), "centipede": (2090.9, 12017.0),
    "chopper_command": (811.0, 7387.8), "crazy_climber": (10780.5, 35829.4),
    "defender": (2874.5, 18688.9), "demon_attack": (152.1, 1971.0),
    "double_dunk": (-18.6, -16.4), "enduro": (0.0, 860.5),
    "fishing_derby": (-91.7, -38.7), "freeway": (0.0, 29.6), "frostbite": (65.2, 4334.7),
    "gopher": (257.6, 2412.5), "gravitar": (173.0, 3351.4), "hero": (1027.0, 30826.4),
    "ice_hockey": (-11.2, 0.9), "jamesbond": (29.0, 302.8), "kangaroo": (52.0, 3035.0),
    "krull": (1598.0, 2665.5), "kung_fu_master": (258.5, 22736.3),
    "montezuma_revenge": (0.0, 4753.3), "ms_pacman": (307.3, 6951.6),
    "name_this_game": (2292.3, 8049.0), "phoenix": (761.4, 7242.6),
    "pitfall": (-229.4, 6463.7), "pong": (-20.7, 14.6), "private_eye": (24.9, 69571.3),
    "qbert": (163.9, 13455.0), "riverraid": (1338.5, 17118.0),
    "road_runner": (11.5, 7845.0), "robotank": (2.2, 11.9), "seaquest": (68.4, 42054.7),
    "skiing": (-17098.1, -4336.9), "solaris": (1236.3, 12326.7),
    "space_invaders": (148.0, 1668.7), "star_gunner": (664.0, 10250.0),
    "surround": (-10.0, 6.5), "tennis": (-23.8, -8.3), "time_pilot": (3568.0, 5229.2),
    "tutankham": (11.4, 167.6), "up_n_down": (533.4, 11693.2), "venture": (0.0, 1187.5),
    "video_pinball": (16256.9, 17667.9), "wizard_of_wor": (563.5, 4756.5),
    "yars_revenge": (3092.9, 54576.9), "zaxxon": (32.5, 9173.3),
}  # fmt: skip

_DMLAB30 = {
    "rooms_collect_good_objects_test": (0.073, 10.0),
    "rooms_exploit_deferred_effects_test": (8.501, 85.65),
    "rooms_select_nonmatching_object": (0.312, 65.9),
    "rooms_watermaze": (4.065, 54.0),
    "rooms_keys_doors_puzzle": (4.135, 53.8),
    "language_select_described_object": (-0.07, 389.5),
    "language_select_located_object": (1.929, 280.7),
    "language_execute_random_task": (-5.913, 254.05),
    "language_answer_quantitative_question": (-0.33, 184.5),
    "lasertag_one_opponent_small": (-0.224, 12.65),
    "lasertag_three_opponents_small": (-0.214, 18.55),
    "lasertag_one_opponent_large": (-0.083, 18.6),
    "lasertag_three_opponents_large": (-0.102, 31.5),
    "natlab_fixed_large_map": (2.173, 36.9),
    "natlab_varying_map_regrowth": (2.989, 24.45),
    "natlab_varying_map_randomized": (7.346, 42.35),
    "skymaze_irreversible_path_hard": (0.1, 100.0),
    "skymaze_irreversible_path_varied": (14.4, 100.0),
    "psychlab_arbitrary_visuomotor_mapping": (0.163, 58.75),
    "psychlab_continuous_recognition": (0.224, 58.3),
    "psychlab_sequential_comparison": (0.129, 39.5),
    "psychlab_visual_search": (0.085, 78.5),
    "explore_object_locations_small": (3.575, 74.45),
    "explore_object_locations_large": (4.673, 65.65),
    "explore_obstructed_goals_small": (6.76, 206.0),
    "explore_obstructed_goals_large": (2.61, 119.5),
    "explore_goal_locations_small": (7.66, 267.5),
    "explore_goal_locations_large": (3.14, 194.5),
    "explore_object_rewards_few": (2.073, 77.7),
    "explore_object_rewards_many": (2.438, 106.7),
}

#: Atari-57 random/human reference returns, keyed by snake_case game name.
ATARI57 = ScoreTable("Atari-57", _ATARI, spelling=_atari_key)
#: DMLab-30 random/human reference returns, keyed by test level name.
DMLAB30 = ScoreTable("DMLab-30", _DMLAB30, spelling=short_name, aliases=LEVEL_MAPPING)


def table_for(levels: Sequence[str]) -> ScoreTable:
    """The table that knows every level: DMLab-30 or Atari-57; a ValueError if neither."""
    for table in (DMLAB30, ATARI57):
        try:
            for level in levels:
                table.canonical(level)
        except ValueError:
            continue
        return table
    table = DMLAB30 if any(short_name(level) != level for level in levels) else ATARI57
    for level in levels:
        table.canonical(level)  # raises, naming the first unknown level
    raise AssertionError("unreachable")


def per_level_scores(
    level_returns: Mapping[str, Sequence[float]],
    per_level_cap: float | None = None,
    table: ScoreTable | None = None,
    require_all: bool = False,
) -> dict[str, float]:
    """Human-normalised score (percent) per level, from each level's episode returns.

    Args:
        level_returns: level name (any accepted spelling: `dmlab:rooms_watermaze`,
            `ALE/Pong-v5`, `pong`) -> returns of its episodes.
        per_level_cap: cap each level's score at this value (e.g. 100) when given.
        table: reference scores; None picks the one that knows every level (`table_for`).
        require_all: raise unless every level of the table has returns.

    Returns:
        the table's level name -> score; levels that map to the same table level (a training
        and a test variant) have their returns pooled.

    Raises:
        ValueError: an unknown level, a level with no returns, or missing levels.
    """
    if not level_returns:
        raise ValueError("no levels to score")
    if table is None:
        table = table_for(list(level_returns))
    pooled: dict[str, list[float]] = {}
    for level, returns in level_returns.items():
        if len(returns) == 0:
            raise ValueError(f"no returns for level {level!r}")
        pooled.setdefault(table.canonical(level), []).extend(float(r) for r in returns)
    if require_all and (missing := sorted(set(table.scores) - set(pooled))):
        raise ValueError(f"{table.name}: no returns for {len(missing)} levels: {missing}")
    scores = {}
    for key, returns in pooled.items():
        score = table.normalize(key, float(np.mean(returns)))
        scores[key] = min(score, per_level_cap) if per_level_cap is not None else score
    return scores


def compute_human_normalized_score(
    level_returns: Mapping[str, Sequence[float]],
    per_level_cap: float | None = None,
    table: ScoreTable | None = None,
    require_all: bool = False,
) -> float:
    """Mean over levels of the (optionally capped) human-normalised score, in percent.

    As the seed's DMLab-30 score: per level `100 * (mean_return - random) / (human - random)`,
    capped at `per_level_cap` when given, averaged over levels. See `per_level_scores`.
    """
    scores = per_level_scores(level_returns, per_level_cap, table, require_all)
    return float(np.mean(list(scores.values())))


def mean_level_return(level_returns: Mapping[str, Sequence[float]]) -> float:
    """Mean over levels of each level's mean return: a multi-task run's one summary score
    for any levels, reference scores or not (unnormalised: a level with large returns
    weighs more; where every level is in a table, the human-normalised score is the fair
    one).

    Raises:
        ValueError: no level, or a level without returns.
    """
    if not level_returns or not all(len(r) for r in level_returns.values()):
        raise ValueError("mean_level_return: every level needs at least one return")
    return float(np.mean([np.mean(r) for r in level_returns.values()]))


def atari_aggregate(
    level_returns: Mapping[str, Sequence[float]],
    per_level_cap: float | None = None,
    require_all: bool = False,
) -> dict[str, float]:
    """Median and mean over Atari games of the human-normalised score (percent)."""
    scores = list(per_level_scores(level_returns, per_level_cap, ATARI57, require_all).values())
    return {"median": float(np.median(scores)), "mean": float(np.mean(scores))}
