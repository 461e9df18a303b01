"""Dict observations of any keys: one `ObsSpec` describes them, and the env batch, the unroll
buffers, the Ray writer, the inference channels, the agent and the loss all carry every key.
The `frame` + `instruction` contract keeps its modules, shapes and names."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from gymnasium import spaces

from gazelle.algorithms.impala.loss import LossSettings, impala_loss
from gazelle.backends.local.buffers import SlotLayout, UnrollBuffers
from gazelle.backends.local.inference import InferenceChannels
from gazelle.backends.local.params import ParamStore
from gazelle.backends.ray.hosts import ArrayWriter
from gazelle.config import Config, ConfigError
from gazelle.envs import make, obs_spec
from gazelle.envs.adapter import dict_converter
from gazelle.envs.batch import SerialEnvs
from gazelle.models import Agent
from gazelle.runtime.actor import Actor, ActorSpec, ObsEncoder
from gazelle.runtime.policy import LocalPolicy
from gazelle.types import DISCRETE, IMAGE, TEXT, VECTOR, ObsSpec

DICT_ENV = "gazelle/DictObs-v0"


def test_a_dict_of_every_kind_is_described_once():
    space = spaces.Dict(
        {
            "screen": spaces.Box(0, 255, (6, 5, 3), np.uint8),
            "gray": spaces.Box(0, 255, (6, 5), np.uint8),
            "health": spaces.Box(-np.inf, np.inf, (1,), np.float64),
            "grid": spaces.Box(0, 1, (2, 3), np.float32),
            "flags": spaces.MultiBinary(3),
            "room": spaces.Discrete(5, start=-2),
            "keys": spaces.MultiDiscrete([2, 3], start=[1, 0]),
            "mission": spaces.Text(20),
            "reward": spaces.Box(0, 1, (1,), np.float32),
        }
    )
    converted, convert = dict_converter(space)
    spec = obs_spec(_FakeEnv(converted))
    kinds = {f.name: (f.kind, f.shape) for f in spec.fields}
    assert kinds == {
        "screen": (IMAGE, (3, 6, 5)),
        "gray": (IMAGE, (1, 6, 5)),
        "health": (VECTOR, (1,)),
        "grid": (VECTOR, (6,)),
        "flags": (VECTOR, (3,)),
        "room": (DISCRETE, (1,)),
        "keys": (DISCRETE, (2,)),
        "mission": (TEXT, (32,)),
        "obs_reward": (VECTOR, (1,)),  # why: 'reward' is the unroll's own field
    }
    assert spec.field("keys").sizes == (2, 3)
    obs = convert(
        {
            "screen": np.arange(90, dtype=np.uint8).reshape(6, 5, 3),
            "gray": np.zeros((6, 5), np.uint8),
            "health": np.array([100.0]),
            "grid": np.ones((2, 3), np.float32),
            "flags": np.array([1, 0, 1], np.int8),
            "room": -1,
            "keys": np.array([2, 2]),
            "mission": "go",
            "reward": np.zeros(1, np.float32),
        }
    )
    assert obs["screen"].shape == (3, 6, 5) and obs["screen"][2, 0, 1] == 5
    assert obs["room"].tolist() == [1] and obs["keys"].tolist() == [1, 2]
    assert obs["health"].dtype == np.float32 and obs["mission"] == "go"


def test_a_space_gazelle_cannot_take_is_refused_naming_its_key():
    space = spaces.Dict({"inner": spaces.Dict({"x": spaces.Sequence(spaces.Discrete(2))})})
    with pytest.raises(ValueError, match=r"Sequence\(Discrete\(2\).* of key 'inner_x'"):
        dict_converter(space)


class _FakeEnv:
    def __init__(self, observation_space):
        self.observation_space = observation_space
        self.action_space = spaces.Discrete(3)


def test_minigrid_through_the_generic_path():
    """MiniGrid's own Dict (image, direction, mission) as any Gymnasium env's: a 7x7 image
    the shallow torso sees scaled up, the direction embedded, the mission as text."""
    env = make("MiniGrid-Empty-5x5-v0", preset="raw", seed=0)
    spec = obs_spec(env)
    assert {f.name: f.kind for f in spec.fields} == {
        "direction": DISCRETE,
        "image": IMAGE,
        "mission": TEXT,
    }
    assert spec.field("image").shape == (3, 7, 7) and spec.num_actions == 7
    agent = Agent(spec, torso="shallow")
    assert agent._upscale["image"] == 3  # why: the shallow torso takes at least 20x20
    with SerialEnvs([lambda: make("MiniGrid-Empty-5x5-v0", preset="raw")], seeds=[0]) as envs:
        encode, state = ObsEncoder(spec), agent.initial_state(1)
        obs, (last_action, reward, done) = encode(envs.reset()), _first_inputs(1)
        for _ in range(5):  # why: a few steps, the LSTM state carried
            out, state = agent.act(obs, last_action, reward, done, state)
            assert out.policy_logits.shape == (1, 7)
            step = envs.step(out.action.numpy())
            assert step.obs["mission"] == ["get to the green goal square"]
            assert step.obs["image"].shape == (1, 3, 7, 7) and step.obs["image"].any()
            obs, last_action = encode(step.obs), out.action
            reward = torch.as_tensor(step.reward).float()
            done = torch.as_tensor(step.terminated | step.truncated)
    env.close()


def _first_inputs(n):
    return torch.zeros(n, dtype=torch.long), torch.zeros(n), torch.ones(n, dtype=torch.bool)


def test_the_env_batch_keeps_every_key_and_the_final_obs():
    with SerialEnvs([lambda: make(DICT_ENV)] * 2, seeds=[0, 1]) as envs:
        obs = envs.reset()
        assert set(obs) == {"mission", "position", "target", "view"}
        assert obs["view"].shape == (2, 3, 8, 8) and obs["target"].dtype == np.int64
        assert not obs["view"].flags.writeable
        for _ in range(8):
            step = envs.step(np.zeros(2, np.int64))
        assert set(step.final_obs) == {0, 1}
        assert set(step.final_obs[0]) == {"mission", "position", "target", "view"}
        assert step.final_obs[0]["mission"] == "press the target button"


def _actor_batch(writer_kind: str):
    """Two unrolls of the real actor on the dict env through a writer; the last one."""
    torch.manual_seed(0)
    spec = obs_spec(make(DICT_ENV))
    agent = Agent(spec, torso="shallow")
    ctx = mp.get_context("spawn")
    params = ParamStore(agent, ctx)
    params.publish(agent, 0)
    layout = SlotLayout(5, spec, 256)
    if writer_kind == "shared":
        writer = UnrollBuffers(layout, num_actors=1, slots_per_actor=4, ctx=ctx)
        writer.attach(writer.open_channel(0))
    else:
        writer = ArrayWriter(layout, 2)
    actor_spec = ActorSpec(
        actor_id=0, level=DICT_ENV, level_id=0, envs_per_actor=2, unroll_length=5,
        obs_spec=spec, torso="shallow", use_lstm=True, seed=3,
    )  # fmt: skip
    actor = Actor(actor_spec, writer, LocalPolicy(Agent(spec, torso="shallow"), params, 2))
    for _ in range(2):
        actor.unroll([0, 1])
    actor.close()
    if writer_kind == "shared":
        return agent, writer.gather([0, 1])
    batch = {k: torch.from_numpy(v) for k, v in writer.arrays().items()}
    return agent, batch


@pytest.mark.parametrize("writer_kind", ["shared", "ray"])
def test_every_key_flows_through_the_unroll_to_the_loss(writer_kind):
    agent, batch = _actor_batch(writer_kind)
    assert batch["view"].shape == (6, 2, 3, 8, 8) and batch["view"].dtype == torch.uint8
    assert batch["target"].shape == (6, 2, 1) and batch["target"].dtype == torch.int64
    assert batch["mission"].shape == (6, 2, 32) and int(batch["mission"][0, 0, 0]) > 0
    assert batch["position"].dtype == torch.float32
    assert int(batch["target"].min()) >= 0 and int(batch["target"].max()) <= 3
    settings = LossSettings(0.99, 0.5, 0.01, "abs_one")
    loss, _ = impala_loss(agent, batch, settings)
    loss.backward()
    grad = agent.encoders["target"].embedding.weight.grad
    assert grad is not None and grad.abs().sum() > 0


def test_the_inference_channels_hold_every_key():
    spec = obs_spec(make(DICT_ENV))
    channels = InferenceChannels(spec, 2, 3, 0, mp.get_context("spawn"))
    assert channels.request["view"].shape == (2, 3, 3, 8, 8)
    assert channels.request["mission"].shape == (2, 3, 32)
    assert channels.obs_names == spec.names


def test_the_frame_and_instruction_agent_keeps_its_modules():
    """Checkpoints of the contract's agents load: the same parameter names as before."""
    spec = ObsSpec((4,), np.dtype(np.float32), 3, has_instruction=True)
    names = {name.split(".")[0] for name in Agent(spec, torso="mlp").state_dict()}
    assert names == {"torso", "instruction", "core", "policy", "baseline"}


def test_withholding_a_key_drops_it_everywhere():
    from gazelle.algorithms.common import agent_obs_spec

    spec = obs_spec(make(DICT_ENV))
    config = Config.of(env=DICT_ENV, withhold_obs="target, mission")
    kept = agent_obs_spec(config, spec)
    assert kept.names == ("position", "view")
    assert "target" not in ObsEncoder(kept)(_batch_of_one(make(DICT_ENV).reset(seed=0)[0]))
    with pytest.raises(ConfigError, match=r"--withhold-obs.*position, target, view"):
        agent_obs_spec(Config.of(env=DICT_ENV, withhold_obs="nope"), spec)


def _batch_of_one(obs):
    return {k: [v] if isinstance(v, str) else np.asarray(v)[None] for k, v in obs.items()}


def test_raw_obs_takes_minigrid_through_the_generic_path_from_the_config():
    """--raw-obs: the run's probe, actors and test mode make the env with preset="raw" (its
    own Dict), not the BabyAI family's frame and instruction."""
    from gazelle.algorithms.common import env_kwargs, probe

    config = Config.of(env="MiniGrid-Empty-5x5-v0", raw_obs=True)
    assert env_kwargs(config)["preset"] == "raw"
    assert probe(config).obs_spec.names == ("direction", "image", "mission")
    assert probe(config.replace(raw_obs=False)).obs_spec.names == ("frame", "instruction")
    with pytest.raises(ConfigError, match="--raw-obs"):
        from gazelle.config import validate

        validate(Config.of(env="ALE/Pong-v5", raw_obs=True, atari_frames="universe"))
