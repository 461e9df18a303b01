"""`--algo a3c --preset universe-starter` is the universe-starter-agent's agent, piece by
piece, each against a case worked out by hand from the seed (a3c.py, model.py):

- its LSTM sees the conv features of its 42x42 frames alone;
- its initialisation (the heads' column norms, the convs' Glorot bound, the LSTM's);
- advantages and returns from the values and bootstrap recorded at acting time;
- rollouts that end at the terminal step, with the runner's bootstrap;
- the preset sets all of that, with Adam 1e-4, clip 40 and the seed's loss weights.
"""

import math
import queue

import numpy as np
import pytest
import torch

from gazelle.algorithms.a3c.loss import A3CLossSettings, a3c_loss
from gazelle.algorithms.a3c.rollouts import QueueWriter, Runner, pull_rollouts
from gazelle.config import Config, ConfigError, resolve, validate
from gazelle.envs import make, obs_spec
from gazelle.envs.probe import EnvProbe
from gazelle.models import Agent
from gazelle.models.torsos import SameConv2d
from gazelle.runtime.actor import ActorSpec
from gazelle.runtime.policy import LocalPolicy
from gazelle.types import ObsSpec

FRAMES = ObsSpec((1, 42, 42), np.dtype(np.uint8), num_actions=6)  # the seed's Pong input
ATARI = EnvProbe(["PongNoFrameskip-v4"], FRAMES, 4, "atari")
VECTOR = EnvProbe(["CartPole-v1"], ObsSpec((4,), np.dtype(np.float32), 2), 1, "gym")


def starter_agent(seed: int = 0) -> Agent:
    torch.manual_seed(seed)
    return Agent(FRAMES, torso="universe", init="universe", last_action_reward=False)


def test_the_preset_is_the_seeds_agent_and_settings():
    config = resolve(validate(Config.of(algo="a3c", preset="universe-starter")), ATARI)
    a3c, model = config.a3c, config.model
    assert (model.torso, model.use_lstm, model.init) == ("universe", True, "universe")
    assert a3c.last_action_reward is False and a3c.advantage_values == "acting"
    assert a3c.end_rollout_at_episode_end is True
    # Adam 1e-4 constant, clip 40, one env per worker, T=20; the loss: gamma 0.99,
    # lambda 1, pi_loss + 0.5 * (0.5 sum (V - R)^2) - 0.01 entropy, rewards unclipped
    assert (a3c.learning_rate, a3c.learning_rate_decay, a3c.epsilon) == (1e-4, False, 1e-8)
    assert (a3c.grad_norm_clip, config.actors.envs_per_actor, a3c.unroll_length) == (40.0, 1, 20)
    assert (a3c.discounting, a3c.gae_lambda) == (0.99, 1.0)
    assert (a3c.baseline_cost, a3c.entropy_cost, a3c.reward_clipping) == (0.5, 0.01, "none")
    assert a3c.queue_size == 5  # the runner's queue.Queue(5)
    # on vector tasks too (the mlp torso: the seed has no network for vectors)
    vector = resolve(Config.of(algo="a3c", preset="universe-starter"), VECTOR)
    assert (vector.a3c.learning_rate, vector.a3c.grad_norm_clip) == (1e-4, 40.0)
    assert (vector.model.init, vector.a3c.advantage_values) == ("universe", "acting")


def test_the_gazelle_preset_is_the_agent_the_pong_runs_chose():
    config = resolve(Config.of(algo="a3c"), ATARI)
    assert config.a3c.preset == "gazelle" and config.model.init == "seed"
    assert config.a3c.last_action_reward is True and config.a3c.advantage_values == "synced"
    assert config.a3c.end_rollout_at_episode_end is True  # the seed's way won on Pong
    # on Atari 2x the seed's Adam step with the norm clipped at 15 (won on Pong, 2 seeds)
    assert (config.a3c.learning_rate, config.a3c.grad_norm_clip) == (2e-4, 15.0)
    assert config.a3c.learning_rate_decay is False and config.actors.envs_per_actor == 1
    # with 4 envs per worker, fixed-length rollouts (short episodes cut them to a few steps)
    assert resolve(Config.of(algo="a3c"), VECTOR).a3c.end_rollout_at_episode_end is False
    assert resolve(Config.of(algo="a3c", end_rollout_at_episode_end=False),
                   ATARI).a3c.end_rollout_at_episode_end is False  # fmt: skip
    # each difference is its own flag: one set, the other three stay the preset's
    mixed = resolve(Config.of(algo="a3c", preset="universe-starter", advantage_values="synced"),
                    ATARI)  # fmt: skip
    assert mixed.a3c.advantage_values == "synced" and mixed.model.init == "universe"
    assert resolve(Config.of(), VECTOR).model.init == "seed"  # IMPALA's: the seed's Sonnet


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"preset": "universe"}, "--preset: invalid value 'universe'; allowed: gazelle | "
                                 "universe-starter"),
        ({"advantage_values": "learner"}, "--advantage-values: invalid value 'learner'; "
                                          "allowed: acting | synced"),
        ({"init": "glorot"}, "--init: invalid value 'glorot'; allowed: seed | universe | torch"),
    ],
)  # fmt: skip
def test_bad_values_are_one_clear_error(flags, message):
    with pytest.raises(ConfigError) as error:
        validate(Config.of(algo="a3c", **flags))
    assert str(error.value).startswith(message)


def test_the_lstm_sees_the_conv_features_alone():
    agent = starter_agent()
    # 42x42 -> 21 -> 11 -> 6 -> 3 after four 'same' stride-2 convs: 32 * 3 * 3 = 288 features
    convs = [m for m in agent.torso.modules() if isinstance(m, SameConv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (1, 32, (3, 3), (2, 2)),
        *[(32, 32, (3, 3), (2, 2))] * 3,
    ]
    assert agent.torso.output_size == 288 and agent.core is not None
    assert (agent.core.lstm.input_size, agent.core.lstm.hidden_size) == (288, 256)
    assert agent.policy.in_features == 256 and agent.baseline.in_features == 256
    frames = torch.randint(0, 256, (5, 2, 1, 42, 42), dtype=torch.uint8)
    done = torch.zeros(5, 2, dtype=torch.bool)
    state = agent.initial_state(2)

    def outputs(agent: Agent, action: int, reward: float) -> torch.Tensor:
        act = torch.full((5, 2), action)
        out, _ = agent.unroll({"frame": frames}, act, torch.full((5, 2), reward), done, state)
        return torch.cat([out.policy_logits.flatten(), out.baseline.flatten()])

    torch.testing.assert_close(outputs(agent, 0, 0.0), outputs(agent, 5, 1.0), rtol=0, atol=0)
    # gazelle's agent, the same weights otherwise: 288 + 1 reward + 6 actions in
    impala_inputs = Agent(FRAMES, torso="universe", init="universe")
    assert impala_inputs.core is not None and impala_inputs.core.lstm.input_size == 295
    assert not torch.equal(outputs(impala_inputs, 0, 0.0), outputs(impala_inputs, 5, 1.0))


def test_the_init_is_the_starter_agents():
    agent = starter_agent()
    # heads: each output unit's weights (a column of TF's [in, out]) have norm 0.01 / 1.0
    rows = agent.policy.weight.norm(dim=1)
    torch.testing.assert_close(rows, torch.full((6,), 0.01))
    torch.testing.assert_close(agent.baseline.weight.norm(dim=1), torch.ones(1))
    assert not torch.allclose(agent.policy.weight.norm(dim=0), torch.full((256,), 0.01))
    for head in (agent.policy, agent.baseline):
        assert torch.count_nonzero(head.bias) == 0
    # convs: uniform in +-sqrt(6 / (fan_in + fan_out)), fans of the 3x3 filter:
    # first 9 in, 288 out -> 0.14213; the others 288 and 288 -> 0.10206
    first, other = math.sqrt(6 / (9 + 288)), math.sqrt(6 / (288 + 288))
    assert (first, other) == (pytest.approx(0.14213, abs=1e-5), pytest.approx(0.10206, abs=1e-5))
    convs = [m for m in agent.torso.modules() if isinstance(m, SameConv2d)]
    for conv, bound in zip(convs, [first, other, other, other]):
        w = conv.weight.detach()
        assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.98 * bound
        assert float(w.std()) == pytest.approx(bound / math.sqrt(3), rel=0.06)  # uniform's std
        assert torch.count_nonzero(conv.bias) == 0
    # LSTM (TF's BasicLSTMCell, default Glorot-uniform over its [288 + 256, 1024] kernel):
    # sqrt(6 / (544 + 1024)) = 0.061859; biases 0 but the forget gate's 1
    bound = math.sqrt(6 / (288 + 256 + 4 * 256))
    assert bound == pytest.approx(0.061859, abs=1e-6)
    lstm = agent.core.lstm if agent.core is not None else None
    assert lstm is not None
    for w in (lstm.weight_ih_l0.detach(), lstm.weight_hh_l0.detach()):
        assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.98 * bound
        assert float(w.std()) == pytest.approx(bound / math.sqrt(3), rel=0.02)
    forget = torch.zeros(1024)
    forget[256:512] = 1.0  # torch's gate order: input, forget, cell, output
    torch.testing.assert_close(lstm.bias_ih_l0.detach(), forget, rtol=0, atol=0)
    assert torch.count_nonzero(lstm.bias_hh_l0) == 0


# A rollout written out by hand (E = 1, T = 3), gamma 0.5, lambda 1:
#   rewards r = [1, 0, 2], acting-time values V = [0.5, 1, -1], bootstrap R_3 = 4
#   returns R_t = r_t + 0.5 R_{t+1}:            R = [2, 2, 4]
#   deltas  r_t + 0.5 V_{t+1} - V_t:           [1, -1.5, 5]
#   advantages A_t = delta_t + 0.5 A_{t+1}:     A = [1.5, 1, 5]   (= R - V, as lambda = 1)
# With the episode ending at the last step, the bootstrap is not used:
#   R = [1.5, 1, 2], A = [1, 0, 3]
HAND = A3CLossSettings(0.5, 1.0, 0.01, 0.5, "none", "acting")


def hand_rollout(ends: bool) -> dict[str, torch.Tensor]:
    torch.manual_seed(3)
    batch = {
        "frame": torch.randn(4, 1, 4),
        "action": torch.tensor([[0], [1], [0], [2]]),
        "reward": torch.tensor([[0.0], [1.0], [0.0], [2.0]]),  # [t+1]: the reward of step t
        "terminated": torch.tensor([[False], [False], [False], [ends]]),
        "truncated": torch.zeros(4, 1, dtype=torch.bool),
        "truncation_value": torch.zeros(4, 1),
        "baseline": torch.tensor([[9.0], [0.5], [1.0], [-1.0]]),  # [t+1]: V(x_t) when acting
        "bootstrap": torch.tensor([4.0]),
        "state_h": torch.zeros(1, 8),
        "state_c": torch.zeros(1, 8),
    }
    return batch


@pytest.mark.parametrize(
    ("ends", "returns", "advantages"),
    [(False, [2.0, 2.0, 4.0], [1.5, 1.0, 5.0]), (True, [1.5, 1.0, 2.0], [1.0, 0.0, 3.0])],
)
def test_advantages_come_from_the_acting_time_values_and_bootstrap(ends, returns, advantages):
    agent = Agent(ObsSpec((4,), np.dtype(np.float32), 3), "mlp", core_size=8)
    batch = hand_rollout(ends)
    loss, metrics = a3c_loss(agent, batch, HAND)
    with torch.no_grad():
        out, _ = agent.unroll(
            {"frame": batch["frame"]}, batch["action"], batch["reward"], batch["terminated"],
            (batch["state_h"], batch["state_c"]),
        )  # fmt: skip
    logp = torch.log_softmax(out.policy_logits[:-1, 0], -1)
    values = out.baseline[:-1, 0]
    adv, ret = torch.tensor(advantages), torch.tensor(returns)
    pi_loss = -(logp[torch.arange(3), batch["action"][1:, 0]] * adv).sum()
    vf_loss = 0.5 * ((values - ret) ** 2).sum()  # the network's values against R
    entropy = -(logp.exp() * logp).sum()
    assert float(metrics["a3c/advantage_mean"]) == pytest.approx(float(adv.mean()), abs=1e-6)
    assert float(metrics["losses/policy"]) == pytest.approx(float(pi_loss), rel=1e-5)
    assert float(metrics["losses/baseline"]) == pytest.approx(float(vf_loss), rel=1e-5)
    expected = pi_loss + 0.5 * vf_loss - 0.01 * entropy
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    # the synced network's values give other advantages (the network is not the runner's)
    synced = A3CLossSettings(0.5, 1.0, 0.01, 0.5, "none", "synced")
    _, other = a3c_loss(agent, batch, synced)
    assert float(other["a3c/advantage_mean"]) != pytest.approx(float(adv.mean()), abs=1e-3)


class FixedParams:
    """A `ParamSource` whose weights never change (version 0)."""

    def current_version(self) -> int:
        return 0

    def pull(self, module, have_version: int) -> int:
        return 0


def run_runner(end_at_episode_end: bool, unroll_length: int, unrolls: int):
    """The runner on `gazelle/Memory-v0` with every episode exactly 4 steps (delay 3)."""
    torch.manual_seed(0)
    level, kwargs = "gazelle/Memory-v0", {"delay": 3, "min_delay": 3}
    spec = obs_spec(make(level, **kwargs))
    actor_spec = ActorSpec(
        actor_id=0, level=level, level_id=0, envs_per_actor=1, unroll_length=unroll_length,
        obs_spec=spec, torso="mlp", use_lstm=True, seed=5, env_kwargs=kwargs,
        last_action_reward=False,
    )  # fmt: skip
    agent = Agent(spec, "mlp", last_action_reward=False)
    writer = QueueWriter(spec, unroll_length, 1, True, maxsize=unrolls)
    policy = LocalPolicy(Agent(spec, "mlp", last_action_reward=False), FixedParams(), 1)
    policy.agent.load_state_dict(agent.state_dict())
    runner = Runner(actor_spec, writer, policy, end_at_episode_end=end_at_episode_end,
                    record_bootstrap=True)  # fmt: skip
    rollouts = []
    for _ in range(unrolls):
        slots = writer.acquire(0, 1, 1.0, lambda: False)
        runner.unroll(slots)
        writer.commit(slots, 0, 0, 0)
        rollouts.append(writer.rollouts.get_nowait())
    runner.close()
    return agent, rollouts


def test_a_rollout_ends_at_the_terminal_step():
    _, rollouts = run_runner(end_at_episode_end=True, unroll_length=10, unrolls=3)
    for rollout in rollouts:
        # 4 steps (indices 1..4) after index 0, the 4th ending the episode; the next rollout's
        # index 0 repeats that terminal step and its obs starts the new episode
        assert rollout["reward"].shape == (5, 1) and rollout["frame"].shape == (5, 1, 3)
        assert rollout["terminated"][1:, 0].tolist() == [False, False, False, True]
        assert rollout["reward"][1:4, 0].tolist() == [0.0, 0.0, 0.0]  # the reward comes last
        assert abs(float(rollout["reward"][4, 0])) == 1.0
    assert bool(rollouts[1]["terminated"][0, 0]) and float(rollouts[1]["frame"][0, 0, 2]) == 0.0
    # not joined with the next one: it ended an episode
    waiting: queue.Queue = queue.Queue()
    for rollout in rollouts[:2]:
        waiting.put(rollout)
    assert pull_rollouts(waiting, lambda: False, 1.0)["reward"].shape == (5, 1)
    # without the cut: T steps across the episode end, the next episode's 6 steps masked by done
    _, fixed = run_runner(end_at_episode_end=False, unroll_length=10, unrolls=1)
    assert fixed[0]["reward"].shape == (11, 1)
    assert (
        fixed[0]["terminated"][1:, 0].tolist()
        == [False] * 3 + [True] + [False] * 3 + [True] + [False] * 2
    )


def test_the_runner_records_its_values_and_bootstrap():
    """The seed's `rollout.values` and `rollout.r`: V(x_t) of the weights that acted, from the
    state the runner carried, and V(x_T) after the last step."""
    agent, rollouts = run_runner(end_at_episode_end=True, unroll_length=3, unrolls=2)
    # steps 1-3 of the first episode, then its 4th alone: cut at the terminal after 1 step
    assert [r["reward"].shape[0] for r in rollouts] == [4, 2]
    assert [bool(r["terminated"][-1, 0]) for r in rollouts] == [False, True]
    for rollout in rollouts:
        done = rollout["terminated"] | rollout["truncated"]
        with torch.no_grad():
            out, _ = agent.unroll(
                {"frame": rollout["frame"]}, rollout["action"], rollout["reward"], done,
                (rollout["state_h"], rollout["state_c"]),
            )  # fmt: skip
        # the same weights: the learner's V(x_t) are the runner's
        torch.testing.assert_close(rollout["baseline"][1:], out.baseline[:-1])
        # the loss from acting-time values then equals the synced one
        acting = a3c_loss(agent, rollout, A3CLossSettings(0.99, 1.0, 0.01, 0.5, "none", "acting"))
        synced = a3c_loss(agent, rollout, A3CLossSettings(0.99, 1.0, 0.01, 0.5, "none", "synced"))
        assert float(acting[0].detach()) == pytest.approx(float(synced[0].detach()), rel=1e-5)
        if not rollout["terminated"][-1, 0]:
            # where the rollout did not end its episode, the bootstrap is V(x_T) (used)
            torch.testing.assert_close(rollout["bootstrap"], out.baseline[-1])
