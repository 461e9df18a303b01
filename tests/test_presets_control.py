"""The control family: an env whose actions include a Gaussian part (a float Box) and whose
observations are vectors gets the algorithm's control preset, and APPO when `--algo` is
unset (HalfCheetah-v5 learned nothing at the vector defaults, docs/notes/continuous.md).
Real envs throughout: gazelle/Reach-v0 (a Box action on vector observations), Pendulum-v1
(Gymnasium's classic control, no MuJoCo needed), gazelle/Controls-v0 (a Dict of buttons, a
dial and a lever), CartPole-v1 (discrete)."""

import numpy as np
import pytest
from gymnasium import spaces

import gazelle.api
from gazelle.cli import build_parser, config_from_args
from gazelle.config import Config, ConfigError, env_family, resolve, validate
from gazelle.config.presets import default_algo, family_of
from gazelle.envs.probe import probe
from gazelle.envs.spaces import obs_spec_of

REACH = "gazelle/Reach-v0"


def command(*argv: str, logdir: str = "unused") -> Config:
    """The resolved config of `gazelle train ARGV` (as the run resolves it)."""
    config = config_from_args(build_parser().parse_args(["train", "--logdir", logdir, *argv]))
    return validate(resolve(validate(config), probe(config.env.id)))


@pytest.mark.parametrize(
    ("env", "family"),
    [
        (REACH, "control"),
        ("Pendulum-v1", "control"),
        ("gazelle/Controls-v0", "control"),  # a Gaussian part among discrete ones
        ("CartPole-v1", "vector"),
        ("gazelle/Memory-v0", "vector"),
        ("gazelle/Catch-v0", "image"),
    ],
)
def test_the_family_is_read_from_the_actions_and_observations(env, family):
    assert env_family(probe(env)) == family


def test_a_box_action_on_images_or_of_a_kind_with_its_own_family_is_not_control():
    box = spaces.Box(-1, 1, (2,), np.float32)
    image = obs_spec_of(spaces.Dict({"frame": spaces.Box(0, 255, (3, 32, 32), np.uint8)}), box)
    vector = obs_spec_of(spaces.Dict({"frame": spaces.Box(-1, 1, (5,), np.float32)}), box)
    assert family_of("gym", image) == "image"
    assert family_of("gym", vector) == "control"
    assert family_of("vizdoom", vector) == "vizdoom"  # e.g. its delta buttons
    assert family_of("gym", obs_spec_of(vector_space(), spaces.Discrete(3))) == "vector"


def vector_space() -> spaces.Dict:
    return spaces.Dict({"frame": spaces.Box(-1, 1, (5,), np.float32)})


def test_a_command_that_names_no_algorithm_trains_control_with_appo():
    assert default_algo(REACH) == "appo" and default_algo("Pendulum-v1") == "appo"
    assert default_algo("CartPole-v1") == "impala"
    assert gazelle.api.default_algo(REACH) == "appo"  # `gazelle.train({...})` without algo
    assert command("--env", REACH).algo == "appo"
    assert command("--env", REACH, "--algo", "impala").algo == "impala"
    # a preset of one algorithm still picks it (the paper's IMPALA)
    assert command("--env", REACH, "--preset", "impala-paper").algo == "impala"


def test_appo_runs_control_with_ppos_shape_and_the_clip_at_the_learner():
    """What continuous.md measured best on HalfCheetah-v5 and Hopper-v5 (sittings 3 and 8)."""
    config = command("--env", REACH)
    got = {
        name: config.get(name)
        for name in (
            "envs_per_actor", "batch_size", "unroll_length", "lockstep", "epochs", "minibatches",
            "minibatch_unit", "clip_ratio", "clip_anchor", "entropy_cost", "learning_rate",
            "optimizer",
            "reward_clipping", "popart", "normalize_advantages", "vtrace_lambda",
            "normalize_obs", "separate_value", "use_lstm", "total_frames",
        )
    }  # fmt: skip
    assert got == {
        "envs_per_actor": 8, "batch_size": 8, "unroll_length": 256, "epochs": 10,
        "minibatches": 32, "minibatch_unit": "step", "clip_ratio": 0.2,
        "clip_anchor": "learner", "entropy_cost": 0.0,
        "learning_rate": 0.0003, "optimizer": "adam", "reward_clipping": "none",
        "popart": True, "normalize_advantages": True, "vtrace_lambda": 0.95,
        "normalize_obs": True, "separate_value": True, "use_lstm": False,
        "total_frames": 1_000_000, "lockstep": True,
    }  # fmt: skip
    # the discrete vector tasks keep the vector preset
    cartpole = command("--env", "CartPole-v1", "--algo", "appo")
    assert (cartpole.get("batch_size"), cartpole.get("epochs")) == (16, 2)
    assert cartpole.get("reward_clipping") == "abs_one" and not cartpole.get("normalize_obs")
    assert cartpole.get("clip_anchor") is None and not cartpole.get("separate_value")
    assert cartpole.get("lockstep") is None


def test_impala_and_a3c_have_control_presets_and_a3c_normalises_no_observations():
    impala = command("--env", REACH, "--algo", "impala")
    assert (impala.get("learning_rate"), impala.get("optimizer")) == (0.001, "adam")
    assert (impala.get("reward_clipping"), impala.get("popart")) == ("none", True)
    assert impala.get("normalize_obs") is True and impala.get("entropy_cost") == 0.0
    vector = command("--env", "CartPole-v1", "--algo", "impala")
    assert vector.get("reward_clipping") == "abs_one" and vector.get("optimizer") == "rmsprop_tf"
    a3c = command("--env", REACH, "--algo", "a3c")  # validates: A3C refuses --normalize-obs
    assert not a3c.get("normalize_obs") and a3c.get("reward_clipping") == "none"
    assert a3c.get("total_frames") == 1_000_000 and a3c.get("use_lstm") is False
    # APPO on the paper's IMPALA preset runs the same agent (no LSTM beside --separate-value)
    paper = command("--env", REACH, "--algo", "appo", "--preset", "impala-paper")
    assert paper.get("separate_value") is True and paper.get("use_lstm") is False


def test_a_flag_given_beats_the_control_preset():
    config = command(
        "--env", REACH, "--batch-size", "32", "--minibatches", "4", "--clip-anchor",
        "behaviour", "--no-separate-value", "--no-normalize-obs", "--reward-clipping",
        "abs_one", "--entropy-cost", "0.01",
    )  # fmt: skip
    assert (config.get("batch_size"), config.get("minibatches")) == (32, 4)
    assert config.get("clip_anchor") == "behaviour" and config.get("separate_value") is False
    assert config.get("normalize_obs") is False and config.get("reward_clipping") == "abs_one"
    assert config.get("entropy_cost") == 0.01 and config.get("epochs") == 10


def test_the_default_control_command_trains(tmp_path):
    """`gazelle train --env gazelle/Reach-v0` as it resolves (APPO, the control preset: the
    separate value network, observation statistics, PopArt, the clip at the learner), cut
    to one actor and two batches: it acts and learns (a feed-forward run with a Box action
    once raised at its first batch, in the memory check)."""
    from gazelle.algorithms import train

    config = command(
        "--env", REACH, "--total-frames", "4096", "--num-actors", "1", "--log-interval-s", "1",
        logdir=str(tmp_path),
    )  # fmt: skip
    result = train(config)
    assert result.frames >= 4096 and result.updates >= 2, result


def test_the_control_preset_acts_with_one_actor_in_lockstep_and_says_where_it_cannot(
    tmp_path, capsys
):
    """The preset's 256-step unrolls want no policy lag (Hopper-v5, seed 1: 1,945 in
    lockstep, 561 free-running at a lag of 3-4): the layout is one actor acting in step
    with the learner; where lockstep cannot act, the run says that the preset asked for it."""
    from gazelle.algorithms.common import prepare
    from gazelle.algorithms.impala.build import actor_specs

    config, found, _ = prepare(command("--env", REACH, logdir=str(tmp_path)))
    specs = actor_specs(config, found)
    assert config.actors.num_actors == 1 and [spec.lockstep_batch for spec in specs] == [8]
    assert "--lockstep does not act" not in capsys.readouterr().out
    argv = ["train", "--env", REACH, "--inference", "central", "--logdir", str(tmp_path)]
    prepare(config_from_args(build_parser().parse_args(argv)))  # as `gazelle train` does
    out = capsys.readouterr().out
    warned = [line for line in out.splitlines() if "--lockstep (appo's gazelle preset" in line]
    assert len(warned) == 1 and "--inference central" in warned[0], out


def test_a_preset_value_that_clashes_with_a_flag_given_is_named_as_the_presets(tmp_path):
    """`--unroll-length 50` on a control env: the preset's 32 minibatches of single steps
    do not divide its 8 x 50 steps. The error says the 32 came from the preset and which
    flag to set, not "invalid value 32" as if the user had typed it; a value the user typed
    keeps the plain message."""
    from gazelle.algorithms.common import prepare

    def refused(*argv: str) -> str:
        config = config_from_args(
            build_parser().parse_args(["train", "--logdir", str(tmp_path), "--env", REACH, *argv])
        )
        with pytest.raises(ConfigError) as err:
            prepare(config)
        return str(err.value)

    message = refused("--unroll-length", "50")
    assert message.startswith("--minibatches: 32 is appo's gazelle preset for control envs")
    assert "(set --minibatches)" in message
    assert "a divisor of --batch-size x --unroll-length (400 steps per batch)" in message
    assert refused("--unroll-length", "50", "--minibatches", "3").startswith(
        "--minibatches: invalid value 3;"
    )
