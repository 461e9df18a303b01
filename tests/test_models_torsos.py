"""Torsos: output shapes and parameter counts (computed by hand), TF 'same' padding, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gazelle.models import TORSOS, Agent
from gazelle.models.torso_factory import make_torso
from gazelle.models.torsos import SameConv2d, max_pool_same, same_padding
from gazelle.types import ObsSpec

# Frame shapes as the runtime gives them. BabyAI: the rendered grid, assumed 3x56x56 uint8.
ATARI = (4, 84, 84)
DMLAB = (3, 72, 96)
BABYAI = (3, 56, 56)


def conv(cin: int, cout: int, k: int) -> int:
    return cout * (cin * k * k + 1)


def linear(nin: int, nout: int) -> int:
    return nout * (nin + 1)


def lstm(nin: int, hidden: int) -> int:
    # torch's LSTM has two bias vectors per gate.
    return 4 * hidden * (nin + hidden) + 8 * hidden


def deep_params(c: int, h: int, w: int) -> int:
    """(h, w): spatial size after the three stride-2 pools."""
    stages = conv(c, 16, 3) + 4 * conv(16, 16, 3)
    stages += conv(16, 32, 3) + 4 * conv(32, 32, 3)
    stages += conv(32, 32, 3) + 4 * conv(32, 32, 3)
    return stages + linear(32 * h * w, 256)


def shallow_params(c: int, h: int, w: int) -> int:
    return conv(c, 16, 8) + conv(16, 32, 4) + linear(32 * h * w, 256)


def nature_params(c: int, h: int, w: int) -> int:
    return conv(c, 32, 8) + conv(32, 64, 4) + conv(64, 64, 3) + linear(64 * h * w, 512)


def universe_params(c: int) -> int:
    return conv(c, 32, 3) + 3 * conv(32, 32, 3)


# (torso, frame shape, expected parameters, expected output size); spatial sizes by hand:
# deep 84 -> 42 -> 21 -> 11, 72x96 -> 9x12, 56 -> 7; shallow 84 -> 20 -> 9, 72x96 -> 17x23
# -> 7x10, 56 -> 13 -> 5; nature 84 -> 7, 72x96 -> 5x8, 56 -> 3; universe 84 -> 6,
# 72x96 -> 5x6, 56 -> 4, 42 -> 3.
CASES = [
    ("deep", ATARI, deep_params(4, 11, 11), 256),
    ("deep", DMLAB, deep_params(3, 9, 12), 256),
    ("deep", BABYAI, deep_params(3, 7, 7), 256),
    ("shallow", ATARI, shallow_params(4, 9, 9), 256),
    ("shallow", DMLAB, shallow_params(3, 7, 10), 256),
    ("shallow", BABYAI, shallow_params(3, 5, 5), 256),
    ("nature", ATARI, nature_params(4, 7, 7), 512),
    ("nature", DMLAB, nature_params(3, 5, 8), 512),
    ("nature", BABYAI, nature_params(3, 3, 3), 512),
    ("universe", ATARI, universe_params(4), 32 * 6 * 6),
    ("universe", DMLAB, universe_params(3), 32 * 5 * 6),
    ("universe", BABYAI, universe_params(3), 32 * 4 * 4),
    ("universe", (1, 42, 42), universe_params(1), 288),
    ("mlp", (4,), linear(4, 64) + linear(64, 64), 64),
]


@pytest.mark.parametrize(("name", "shape", "params", "out"), CASES)
def test_torso_shapes_and_parameter_counts(name, shape, params, out):
    torch.manual_seed(0)
    torso = make_torso(name, shape)
    assert sum(p.numel() for p in torso.parameters()) == params
    assert torso.output_size == out
    if len(shape) == 3:
        frames = torch.randint(0, 256, (2, *shape), dtype=torch.uint8)
    else:
        frames = torch.randn(2, *shape)
    features = torso(frames)
    assert features.shape == (2, out)
    assert features.dtype == torch.float32
    assert torch.isfinite(features).all()


def test_agent_parameter_count_with_instruction():
    spec = ObsSpec(BABYAI, np.dtype(np.uint8), num_actions=7, has_instruction=True)
    agent = Agent(spec, torso="shallow", use_lstm=True, core_size=256)
    instruction = 1001 * 20 + lstm(20, 64)
    core_input = 256 + 1 + 7 + 64
    expected = shallow_params(3, 5, 5) + instruction + lstm(core_input, 256)
    expected += linear(256, 7) + linear(256, 1)
    assert sum(p.numel() for p in agent.parameters()) == expected


def test_feed_forward_agent_heads_read_the_core_input():
    spec = ObsSpec((4,), np.dtype(np.float32), num_actions=3)
    agent = Agent(spec, torso="mlp", use_lstm=False)
    core_input = 64 + 1 + 3
    expected = linear(4, 64) + linear(64, 64) + linear(core_input, 3) + linear(core_input, 1)
    assert sum(p.numel() for p in agent.parameters()) == expected
    assert agent.initial_state(5) == ()


def test_registry_lists_all_torsos():
    assert set(TORSOS) == {"deep", "shallow", "nature", "universe", "mlp"}


def test_unknown_torso_names_value_and_choices():
    spec = ObsSpec(ATARI, np.dtype(np.uint8), num_actions=6)
    with pytest.raises(ValueError, match=r"'resnet9000'.*deep.*mlp"):
        Agent(spec, torso="resnet9000")


@pytest.mark.parametrize("name", ["deep", "shallow", "nature", "universe"])
def test_image_torso_rejects_vector_frames(name):
    with pytest.raises(ValueError, match="image frames"):
        make_torso(name, (4,))


def test_too_small_frames_are_rejected():
    with pytest.raises(ValueError, match=r"\(3, 20, 20\) are too small"):
        make_torso("nature", (3, 20, 20))


def test_mlp_rejects_image_frames():
    with pytest.raises(ValueError, match="vector frames"):
        make_torso("mlp", ATARI)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 9, 11, 12, 21, 42, 84])
def test_same_padding_matches_tensorflow(size):
    # TF 'SAME': out = ceil(in / stride), the odd padding pixel after.
    before, after = same_padding(size, 3, 2)
    assert (size + before + after - 3) // 2 + 1 == math.ceil(size / 2)
    assert after - before in (0, 1)


@pytest.mark.parametrize("height", [5, 8, 21, 42])
@pytest.mark.parametrize("width", [6, 11, 12])
def test_max_pool_same_equals_explicit_minus_inf_padding(height, width):
    x = torch.randn(2, 3, height, width)
    (top, bottom), (left, right) = same_padding(height, 3, 2), same_padding(width, 3, 2)
    reference = F.max_pool2d(F.pad(x, (left, right, top, bottom), value=-math.inf), 3, 2)
    out = max_pool_same(x)
    assert out.shape == (2, 3, math.ceil(height / 2), math.ceil(width / 2))
    assert torch.equal(out, reference)


@pytest.mark.parametrize("size", [6, 7, 42])
def test_same_conv_equals_explicit_zero_padding(size):
    torch.manual_seed(0)
    layer = SameConv2d(2, 4, 3, 2)
    x = torch.randn(1, 2, size, size)
    before, after = same_padding(size, 3, 2)
    reference = F.conv2d(F.pad(x, (before, after, before, after)), layer.weight, layer.bias, 2)
    torch.testing.assert_close(layer(x), reference)


def test_deep_spatial_sizes_follow_tensorflow():
    torso = make_torso("deep", DMLAB)
    x = torch.zeros(1, *DMLAB)
    sizes = []
    for stage in torso.convs:
        x = stage(x)
        sizes.append(tuple(x.shape[1:]))
    assert sizes == [(16, 36, 48), (32, 18, 24), (32, 9, 12)]


@pytest.mark.parametrize("grad", [True, False])
def test_channels_last_does_not_change_outputs(grad):
    torch.manual_seed(0)
    torso = make_torso("deep", (3, 24, 24))
    frames = torch.randint(0, 256, (3, 3, 24, 24), dtype=torch.uint8)
    with torch.set_grad_enabled(grad):
        torso.channels_last_act = torso.channels_last_learn = True
        fast = torso(frames)
        torso.channels_last_act = torso.channels_last_learn = False
        plain = torso(frames)
    torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-5)


def test_channels_last_choice_follows_autograd():
    torso = make_torso("shallow", (3, 36, 36))
    seen = []
    torso.convs[0].register_forward_pre_hook(
        lambda module, args: seen.append(args[0].is_contiguous())
    )
    frames = torch.zeros(2, 3, 36, 36, dtype=torch.uint8)
    torso(frames)  # learning: channels_last
    with torch.inference_mode():
        torso(frames)  # acting: plain layout
    assert seen == [False, True]


def test_image_frames_are_scaled_to_unit_range():
    torch.manual_seed(0)
    torso = make_torso("shallow", (1, 36, 36))
    frames = torch.randint(0, 256, (2, 1, 36, 36), dtype=torch.uint8)
    expected = F.relu(torso.linear(torso.convs(frames.float() / 255.0).flatten(1)))
    torch.testing.assert_close(torso(frames), expected)


@pytest.mark.parametrize("name", ["deep", "shallow", "nature"])
def test_activation_elu_replaces_every_relu_and_keeps_the_parameters(name):
    """`--activation elu`: the same weights (a checkpoint's shapes), every ReLU an ELU, and a
    unit whose input is negative on every frame still passes a gradient."""
    relu, elu = make_torso(name, (4, 84, 84)), make_torso(name, (4, 84, 84), "elu")
    assert relu.state_dict().keys() == elu.state_dict().keys()
    kinds = [type(m) for m in elu.modules()]
    assert nn.ReLU not in kinds and kinds.count(nn.ELU) >= 3
    assert [type(m) for m in make_torso(name, (4, 84, 84), "relu").modules()] == [
        type(m) for m in relu.modules()
    ]
    elu.load_state_dict(relu.state_dict())
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():  # every unit of the last layer at -3 on every frame
        for torso in (relu, elu):
            torso.linear.weight.zero_()
            torso.linear.bias.fill_(-3.0)
    grads = []
    for torso in (relu, elu):
        torso.zero_grad()
        torso(frames).sum().backward()
        grads.append(torso.linear.bias.grad.abs().sum().item())
    # ReLU: nothing; ELU: its slope there, exp(-3), per unit and frame
    assert grads[0] == 0.0
    assert grads[1] == pytest.approx(2 * elu.output_size * math.exp(-3.0), rel=1e-4)


def test_the_universe_torso_keeps_its_elu_unless_told_and_takes_relu():
    own, relu = make_torso("universe", (1, 42, 42)), make_torso("universe", (1, 42, 42), "relu")
    assert [type(m) for m in own.convs][1::2] == [nn.ELU] * 4
    assert [type(m) for m in relu.convs][1::2] == [nn.ReLU] * 4
    assert own.state_dict().keys() == relu.state_dict().keys()
    assert [type(m) for m in make_torso("universe", (1, 42, 42), "elu").modules()] == [
        type(m) for m in own.modules()
    ]


def test_activation_is_refused_for_torsos_with_their_own_and_bad_names_are_named():
    with pytest.raises(ValueError, match=r"activation 'elu': torso 'mlp' has its own; only deep"):
        make_torso("mlp", (4,), "elu")
    with pytest.raises(ValueError, match=r"activation: invalid value 'tanh'; allowed: relu \| elu"):
        make_torso("shallow", (4, 84, 84), "tanh")


def test_the_config_knows_the_same_activations_and_torsos_as_the_models():
    """The config checks `--activation` without importing the models: its two lists must
    stay the models' own."""
    from gazelle.config import validation
    from gazelle.models.torsos import ACTIVATIONS, WITH_ACTIVATION

    assert tuple(ACTIVATIONS) == validation.ACTIVATION_CHOICES
    assert validation.TORSO_ACTIVATIONS == WITH_ACTIVATION
