"""A composite action space (`gazelle/Controls-v0`: MultiBinary, Discrete and Box in a Dict)
runs through every algorithm and transport: the actions the actors store, the unrolls,
central inference (local and Ray), A3C's workers, the checkpoint and test mode."""

from __future__ import annotations

import pytest

from gazelle.algorithms import train
from gazelle.checkpoint import load
from gazelle.evaluation import evaluate
from test_ray import cluster  # noqa: F401  (the two-node Ray cluster, module-scoped)

pytestmark = pytest.mark.slow

LEVEL = "gazelle/Controls-v0"


def check_run(logdir, result) -> None:
    assert result.frames >= 1_000 and result.updates >= 1, result
    state = load(logdir / "checkpoint.pt")
    # the policy head: 3 bits + 3 choices + 1 mean; the lever's log-std a parameter of its own
    assert state["agent"]["policy.weight"].shape[0] == 7
    assert state["agent"]["log_std"].shape == (1,)
    results = evaluate(logdir, episodes=2, verbose=False)
    assert len(results["levels"][LEVEL]["returns"]) == 2


@pytest.mark.parametrize(
    "overrides",
    [
        {"algo": "impala", "inference": "central"},
        # why: the control preset's 8 minibatches do not divide SMALL's batch of 4 unrolls
        {"algo": "appo", "minibatches": 2},
        {"algo": "a3c", "num_actors": 2, "envs_per_actor": 2, "unroll_length": 10},
    ],
    ids=["impala-central", "appo", "a3c"],
)
def test_a_composite_action_trains_and_is_tested(small_config, tmp_path, overrides):
    config = small_config(env=LEVEL, total_frames=2_000, **overrides)
    check_run(tmp_path, train(config))


@pytest.mark.ray
@pytest.mark.usefixtures("cluster")
def test_a_composite_action_trains_on_ray_with_central_inference(small_config, tmp_path):
    config = small_config(env=LEVEL, total_frames=2_000, backend="ray", inference="central")
    check_run(tmp_path, train(config))
