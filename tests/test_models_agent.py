"""The agent: `unroll` equals `step` calls, resets on done, inputs, greedy, act, bf16."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gazelle.models import Agent, tokenize
from gazelle.types import FRAME, INSTRUCTION, AgentOutput, ObsSpec

SMALL_IMAGE = (3, 20, 20)  # small frames keep the deep torso fast on CPU
WORDS = ["go to the red ball", "open the door", "", "pick up the key"]


def make_agent(torso: str, use_lstm: bool, instruction: bool, seed: int = 0) -> Agent:
    torch.manual_seed(seed)
    shape = {"mlp": (4,), "nature": (3, 36, 36)}.get(torso, SMALL_IMAGE)  # nature: >= 36
    dtype = np.float32 if torso == "mlp" else np.uint8
    spec = ObsSpec(shape, np.dtype(dtype), num_actions=5, has_instruction=instruction)
    return Agent(spec, torso=torso, use_lstm=use_lstm, core_size=32)


def make_inputs(agent: Agent, num_steps: int, batch: int, done_prob: float, seed: int = 0):
    """Random `[T, B, ...]` inputs with episode ends at random."""
    gen = torch.Generator().manual_seed(seed)
    shape = agent.obs_spec.frame_shape
    if agent.obs_spec.is_image:
        frames = torch.randint(0, 256, (num_steps, batch, *shape), generator=gen)
        frames = frames.to(torch.uint8)
    else:
        frames = torch.randn(num_steps, batch, *shape, generator=gen)
    obs = {FRAME: frames}
    if agent.obs_spec.has_instruction:
        picks = torch.randint(0, len(WORDS), (num_steps * batch,), generator=gen).tolist()
        ids = torch.from_numpy(tokenize([WORDS[i] for i in picks]))
        obs[INSTRUCTION] = ids.view(num_steps, batch, -1)
    last_action = torch.randint(0, agent.num_actions, (num_steps, batch), generator=gen)
    reward = 3 * torch.randn(num_steps, batch, generator=gen)  # beyond the clip range too
    done = torch.rand(num_steps, batch, generator=gen) < done_prob
    return obs, last_action, reward, done


def random_state(agent: Agent, batch: int, seed: int = 1) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s.shape, generator=gen) for s in agent.initial_state(batch))


CONFIGS = [
    ("deep", True, False),
    ("deep", False, False),
    ("mlp", True, False),
    ("mlp", False, True),
    ("shallow", True, True),
    ("universe", True, False),
    ("nature", True, False),
]


@pytest.mark.parametrize(("torso", "use_lstm", "instruction"), CONFIGS)
def test_unroll_equals_step_calls(torso, use_lstm, instruction):
    agent = make_agent(torso, use_lstm, instruction)
    num_steps, batch = 6, 3
    obs, last_action, reward, done = make_inputs(agent, num_steps, batch, done_prob=0.25)
    state = random_state(agent, batch)
    unrolled, unroll_state = agent.unroll(obs, last_action, reward, done, state)
    assert unrolled.policy_logits.shape == (num_steps, batch, 5)
    assert unrolled.baseline.shape == (num_steps, batch)
    assert unrolled.action.shape == (num_steps, batch)
    assert unrolled.action.dtype == torch.int64

    step_state = state
    for t in range(num_steps):
        out, step_state = agent.step(
            {k: v[t] for k, v in obs.items()}, last_action[t], reward[t], done[t], step_state
        )
        torch.testing.assert_close(out.policy_logits, unrolled.policy_logits[t])
        torch.testing.assert_close(out.baseline, unrolled.baseline[t])
    assert len(step_state) == len(unroll_state) == (2 if use_lstm else 0)
    for a, b in zip(step_state, unroll_state):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("instruction", [False, True])
def test_step_after_done_ignores_the_incoming_state(instruction):
    agent = make_agent("mlp", True, instruction)
    obs, last_action, reward, _ = make_inputs(agent, 1, 4, done_prob=0.0)
    step_obs = {k: v[0] for k, v in obs.items()}
    done = torch.ones(4, dtype=torch.bool)
    from_random, state_a = agent.step(
        step_obs, last_action[0], reward[0], done, random_state(agent, 4)
    )
    from_fresh, state_b = agent.step(
        step_obs, last_action[0], reward[0], done, agent.initial_state(4)
    )
    torch.testing.assert_close(from_random.policy_logits, from_fresh.policy_logits)
    torch.testing.assert_close(from_random.baseline, from_fresh.baseline)
    for a, b in zip(state_a, state_b):
        torch.testing.assert_close(a, b)
    not_done, _ = agent.step(step_obs, last_action[0], reward[0], ~done, random_state(agent, 4))
    assert not torch.allclose(not_done.policy_logits, from_fresh.policy_logits)


def test_reward_is_clipped_and_last_action_is_an_input():
    agent = make_agent("mlp", False, False)
    obs, _, _, done = make_inputs(agent, 1, 2, done_prob=0.0)
    step_obs = {k: v[0] for k, v in obs.items()}

    def logits(reward: float, action: int) -> torch.Tensor:
        rewards = torch.full((2,), reward)
        actions = torch.full((2,), action)
        return agent.step(step_obs, actions, rewards, done[0], ())[0].policy_logits

    torch.testing.assert_close(logits(7.0, 1), logits(1.0, 1))
    torch.testing.assert_close(logits(-7.0, 1), logits(-1.0, 1))
    assert not torch.allclose(logits(0.5, 1), logits(1.0, 1))
    assert not torch.allclose(logits(0.5, 1), logits(0.5, 2))


def test_greedy_takes_the_argmax_and_sampling_follows_the_policy():
    agent = make_agent("mlp", True, False)
    with torch.no_grad():
        agent.policy.bias.copy_(torch.tensor([0.0, 0.0, 3.0, 0.0, 0.0]))
    obs, last_action, reward, done = make_inputs(agent, 1, 400, done_prob=0.0)
    args = ({k: v[0] for k, v in obs.items()}, last_action[0], reward[0], done[0])
    greedy, _ = agent.step(*args, agent.initial_state(400), greedy=True)
    torch.testing.assert_close(greedy.action, greedy.policy_logits.argmax(-1))
    torch.manual_seed(0)
    sampled, _ = agent.step(*args, agent.initial_state(400))
    probs = torch.softmax(sampled.policy_logits, -1)[:, 2].mean().item()
    share = (sampled.action == 2).float().mean().item()
    assert abs(share - probs) < 0.1
    assert (sampled.action != 2).sum() > 0 and sampled.action.max() < 5


def test_act_equals_step_without_autograd():
    agent = make_agent("mlp", True, True)
    obs, last_action, reward, done = make_inputs(agent, 1, 3, done_prob=0.3)
    args = ({k: v[0] for k, v in obs.items()}, last_action[0], reward[0], done[0])
    state = random_state(agent, 3)
    acted, acted_state = agent.act(*args, state, greedy=True)
    stepped, stepped_state = agent.step(*args, state, greedy=True)
    assert not acted.policy_logits.requires_grad and stepped.policy_logits.requires_grad
    assert torch.equal(acted.action, stepped.action)
    torch.testing.assert_close(acted.policy_logits, stepped.policy_logits)
    torch.testing.assert_close(acted_state[0], stepped_state[0])


def test_unroll_under_bf16_autocast_gives_float32_and_trains():
    agent = make_agent("deep", True, True)
    obs, last_action, reward, done = make_inputs(agent, 4, 2, done_prob=0.2)
    state = random_state(agent, 2)
    reference, _ = agent.unroll(obs, last_action, reward, done, state)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, (h, c) = agent.unroll(obs, last_action, reward, done, state)
    assert isinstance(out, AgentOutput)
    assert out.policy_logits.dtype == out.baseline.dtype == torch.float32
    assert h.dtype == c.dtype == torch.float32
    torch.testing.assert_close(out.policy_logits, reference.policy_logits, atol=0.05, rtol=0.05)
    (out.policy_logits.sum() + out.baseline.sum()).backward()
    grad = agent.torso.convs[0].conv.weight.grad
    assert grad is not None and grad.dtype == torch.float32 and grad.abs().sum() > 0


def test_wrong_input_shapes_are_rejected():
    agent = make_agent("mlp", True, False)
    obs, last_action, reward, done = make_inputs(agent, 2, 3, done_prob=0.0)
    with pytest.raises(ValueError, match=r"\[B, \.\.\.\]"):
        agent.step(obs, last_action, reward, done, agent.initial_state(3))
    with pytest.raises(ValueError, match="frames of shape"):
        agent.unroll({FRAME: obs[FRAME][..., :2]}, last_action, reward, done, ())


def test_missing_instruction_is_rejected():
    agent = make_agent("mlp", True, True)
    obs, last_action, reward, done = make_inputs(agent, 2, 3, done_prob=0.0)
    with pytest.raises(ValueError, match="instruction"):
        agent.unroll({FRAME: obs[FRAME]}, last_action, reward, done, agent.initial_state(3))


def test_agent_attributes_and_initial_state():
    agent = make_agent("shallow", True, False)
    assert agent.num_actions == 5
    assert agent.obs_spec.frame_shape == SMALL_IMAGE
    h, c = agent.initial_state(7, device="cpu")
    assert h.shape == c.shape == (7, 32) and not h.any()
