"""The DMLab-30 suite: its 30 levels and the train -> test level mapping.

Two levels have distinct training and test variants (`rooms_collect_good_objects` and
`rooms_exploit_deferred_effects`); the other 28 are the same level in both modes (test mode
then differs only by DMLab's hold-out configuration, see `gazelle.envs.dmlab`).
"""

from __future__ import annotations

_SHARED = (
    "rooms_select_nonmatching_object",
    "rooms_watermaze",
    "rooms_keys_doors_puzzle",
    "language_select_described_object",
    "language_select_located_object",
    "language_execute_random_task",
    "language_answer_quantitative_question",
    "lasertag_one_opponent_small",
    "lasertag_three_opponents_small",
    "lasertag_one_opponent_large",
    "lasertag_three_opponents_large",
    "natlab_fixed_large_map",
    "natlab_varying_map_regrowth",
    "natlab_varying_map_randomized",
    "skymaze_irreversible_path_hard",
    "skymaze_irreversible_path_varied",
    "psychlab_arbitrary_visuomotor_mapping",
    "psychlab_continuous_recognition",
    "psychlab_sequential_comparison",
    "psychlab_visual_search",
    "explore_object_locations_small",
    "explore_object_locations_large",
    "explore_obstructed_goals_small",
    "explore_obstructed_goals_large",
    "explore_goal_locations_small",
    "explore_goal_locations_large",
    "explore_object_rewards_few",
    "explore_object_rewards_many",
)

#: Training level -> test level, in the suite's canonical order.
LEVEL_MAPPING: dict[str, str] = {
    "rooms_collect_good_objects_train": "rooms_collect_good_objects_test",
    "rooms_exploit_deferred_effects_train": "rooms_exploit_deferred_effects_test",
    **{name: name for name in _SHARED},
}

#: The 30 training levels.
TRAIN_LEVELS: tuple[str, ...] = tuple(LEVEL_MAPPING)
#: The 30 test levels (the names the human/random score tables use).
TEST_LEVELS: tuple[str, ...] = tuple(LEVEL_MAPPING.values())
#: Every DMLab-30 level name, training and test.
ALL_LEVELS: frozenset[str] = frozenset(TRAIN_LEVELS) | frozenset(TEST_LEVELS)
#: Where the DMLab-30 levels live inside DeepMind Lab's level tree.
LEVEL_DIRECTORY = "contributed/dmlab30/"

assert len(TRAIN_LEVELS) == len(set(TEST_LEVELS)) == 30


def level_path(name: str) -> str:
    """The level name DeepMind Lab loads: DMLab-30 levels get their directory prefixed."""
    return LEVEL_DIRECTORY + name if name in ALL_LEVELS else name


def short_name(level: str) -> str:
    """Strip a `dmlab:` spec prefix and the DMLab-30 directory from a level name."""
    if level.startswith("dmlab:"):
        level = level[len("dmlab:") :]
    if level.startswith(LEVEL_DIRECTORY):
        level = level[len(LEVEL_DIRECTORY) :]
    return level
