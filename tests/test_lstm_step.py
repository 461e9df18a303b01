"""The LSTM's share of the learning rate (`--lstm-lr-scale`, issue 58).

An RMSProp or Adam step moves each weight by about the learning rate, so a layer's output
moves with the summed size of its inputs; the LSTM core's and the policy head's inputs are
the core's 256 outputs, mostly near +-1, and at IMPALA's vector rate one update moved the
policy 10-50x as far as the memoryless agent's (docs/notes/lstm.md, "The cause"). The core
and the policy head therefore form an optimiser group of their own, stepped at a share of
the rate. Checked here: the groups and their steps; an older checkpoint (one group) resumes
with every moment in place; and, in a short real run, the policy stays near its actors'.
A3C's shared Adam takes the same share (`--algo a3c --lstm-lr-scale`): its steps against
Adam's formula, bit for bit the one-rate step at 1, the flag through to the run, and a run
saved before it resumed at one rate.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from gazelle.envs import make, obs_spec
from gazelle.models import Agent, build_agent
from gazelle.optim import make_optimizer, param_groups, regroup_state
from gazelle.types import ObsSpec


def lstm_agent() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_agent(obs_spec(make("CartPole-v1")), "mlp", use_lstm=True)


def test_the_core_and_the_policy_head_step_at_their_share_of_the_rate():
    """Adam's first step moves every weight with a gradient by the rate itself (m / sqrt(v)
    is +-1): the core's and the policy head's by a tenth of it, the torso's and the value
    head's by all of it."""
    from gazelle.runtime.learner import Learner

    agent = lstm_agent()
    optimizer = make_optimizer("adam", param_groups(agent, 0.1), lr=1.0, decay=0.0,
                               momentum=0.0, eps=1e-12)  # fmt: skip
    before = {n: p.detach().clone() for n, p in agent.named_parameters()}

    def loss(agent, batch):
        total = sum((p * torch.randn_like(p)).sum() for p in agent.parameters())
        return total, {}

    learner = Learner(agent, optimizer, loss, torch.device("cpu"))
    learner.step({}, learning_rate=0.01)
    moved = {n: float((p.detach() - before[n]).abs().max()) for n, p in agent.named_parameters()}
    for name, step in moved.items():
        expected = 0.001 if name.startswith(("core.", "policy.")) else 0.01
        if name.startswith("log_std"):
            continue
        assert step == pytest.approx(expected, rel=1e-3), (name, step)
    assert any(n.startswith("core.") for n in moved) and any(n.startswith("torso") for n in moved)
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.001, 0.01])


def test_an_agent_without_the_lstm_is_one_group_at_the_whole_rate():
    torch.manual_seed(0)
    agent = build_agent(obs_spec(make("CartPole-v1")), "mlp", use_lstm=False)
    groups = param_groups(agent, 0.1)
    assert len(groups) == 1 and groups[0]["lr_scale"] == 1.0
    assert groups[0]["params"] == list(agent.parameters())


@pytest.mark.parametrize("kind", ["adam", "rmsprop_tf"])
def test_a_checkpoint_of_one_group_resumes_into_the_lstm_groups(kind):
    """A run saved before the split (one group of `agent.parameters()`) loads every
    parameter's moments into the two groups, and at a scale of 1 the next step is the one
    the old optimiser takes."""
    agent = lstm_agent()
    old = make_optimizer(kind, agent.parameters(), lr=0.01, decay=0.99, momentum=0.0, eps=1e-8)
    for _ in range(3):
        old.zero_grad()
        sum((p * p).sum() for p in agent.parameters()).backward()
        old.step()
    saved = copy.deepcopy(old.state_dict())  # why: as read from a file, no shared tensor
    twin = lstm_agent()
    twin.load_state_dict(agent.state_dict())
    new = make_optimizer(kind, param_groups(twin, 1.0), lr=0.01, decay=0.99, momentum=0.0,
                         eps=1e-8)  # fmt: skip
    new.load_state_dict(regroup_state(saved, new, twin))
    for name, p in twin.named_parameters():
        q = dict(agent.named_parameters())[name]
        for key, value in old.state[q].items():
            torch.testing.assert_close(new.state[p][key], value, msg=f"{name} {key}")
    for model, opt in ((agent, old), (twin, new)):
        opt.zero_grad()
        sum((p * p).sum() for p in model.parameters()).backward()
        opt.step()
    for (name, p), q in zip(twin.named_parameters(), agent.parameters()):
        torch.testing.assert_close(p, q, msg=name)


@pytest.mark.learning
@pytest.mark.slow
def test_the_lstm_policy_stays_near_its_actors_on_cartpole(tmp_path, capsys):
    """The fix in a fast form: `gazelle train --env CartPole-v1 --use-lstm` for 60K frames.
    At the whole rate (`--lstm-lr-scale 1`, seed 1) the learner's policy was KL 0.5-0.76
    from the actors' by 22-47K frames and its entropy fell to 0.24-0.38 (2 actions: at most
    0.69); at the preset's tenth, KL <= 0.007 and entropy >= 0.63 (docs/notes/lstm.md). The
    first log line names the share, as A3C's does."""
    from gazelle.cli import main

    assert main(["train", "--env", "CartPole-v1", "--use-lstm", "--seed", "1",
                 "--total-frames", "60000", "--log-interval-s", "0.5",
                 "--logdir", str(tmp_path)]) == 0  # fmt: skip
    assert " lr=0.004 lstm_lr_scale=0.1 " in capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").open()]
    rows = [r for r in rows if "vtrace/kl_behaviour_target" in r]
    assert len(rows) >= 5, rows
    kl = np.array([r["vtrace/kl_behaviour_target"] for r in rows])
    entropy = np.array([r["policy/entropy"] for r in rows])
    assert kl.max() <= 0.1 and entropy.min() >= 0.5, (kl.round(3), entropy.round(2))


def test_a_run_saved_before_the_share_resumes_at_one_rate():
    """A saved config without `lstm_lr_scale` (a run from before it) is read as what that
    run did, every layer at the one rate; a newer preset's tenth must not change it."""
    from gazelle.algorithms.runstate import saved_config
    from gazelle.config import Config

    data = Config.of(env="CartPole-v1", use_lstm=True, lstm_lr_scale=0.1).to_dict()
    for section in data.values():
        if isinstance(section, dict):
            section.pop("lstm_lr_scale", None)
    assert saved_config(data).get("lstm_lr_scale") == 1.0
    kept = Config.of(env="CartPole-v1", use_lstm=True, lstm_lr_scale=0.1).to_dict()
    assert saved_config(kept).get("lstm_lr_scale") == 0.1


# A3C: the shared Adam (`gazelle.algorithms.a3c.shared_adam`) takes the same share.

A3C_SPEC = ObsSpec((4,), np.dtype(np.float32), num_actions=3)
BETAS, EPS = (0.9, 0.999), 1e-8


def small_lstm_agent(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return Agent(A3C_SPEC, "mlp", core_size=8)


def spread_grads(params: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """One gradient per parameter, of sizes 1e-3 to 10 and both signs."""
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(p.shape, generator=g) * 10 ** (4 * torch.rand(p.shape, generator=g) - 3)
        for p in params
    ]


def adam_reference(
    start: list[torch.Tensor], grads: list[list[torch.Tensor]], lr: float, scales: list[float]
) -> list[torch.Tensor]:
    """Adam (Kingma and Ba 2015, Algorithm 1, torch's placement of epsilon) in float64 from
    its formula: m_t = b1 m + (1 - b1) g, v_t = b2 v + (1 - b2) g^2, m_hat = m_t / (1 - b1^t),
    v_hat = v_t / (1 - b2^t), theta -= lr * scale * m_hat / (sqrt(v_hat) + eps), one scale
    per parameter; `grads[t][i]`: step t's gradient of parameter i."""
    b1, b2 = BETAS
    theta = [p.double().clone() for p in start]
    m = [torch.zeros_like(p) for p in theta]
    v = [torch.zeros_like(p) for p in theta]
    for t, step_grads in enumerate(grads, start=1):
        for i, g in enumerate(step_grads):
            g = g.double()
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat, v_hat = m[i] / (1 - b1**t), v[i] / (1 - b2**t)
            theta[i] = theta[i] - lr * scales[i] * m_hat / (v_hat.sqrt() + EPS)
    return theta


@pytest.mark.parametrize("measured", [False, True])
def test_a3c_shared_adam_steps_the_core_and_the_policy_head_at_their_share(measured):
    """`SharedAdamServer(lstm_lr_scale=s)`: the parameters of `param_groups`' first group
    (the core's and the policy head's) move by s times their step at scale 1 (Adam's first
    step: lr * s * sign(g), m_hat / sqrt(v_hat) being +-1), the others exactly as at scale
    1; two steps match Adam's formula with the scale; with and without the layer stats."""
    from gazelle.algorithms.a3c.shared_adam import SharedAdamServer

    lr, s = 0.05, 0.1
    agent = small_lstm_agent()
    names = [n for n, _ in agent.named_parameters()]
    start = [p.detach().clone() for p in agent.parameters()]
    servers = {
        scale: SharedAdamServer(copy.deepcopy(agent), 1, lr=lr, eps=EPS, lstm_lr_scale=scale)
        for scale in (1.0, s)
    }
    scaled = {n for n, x in zip(names, servers[s].lr_scales) if x == s}
    assert scaled == {n for n in names if n.startswith(("core.", "policy."))}
    in_group = {id(p) for p in param_groups(agent, s)[0]["params"]}
    assert scaled == {n for n, p in agent.named_parameters() if id(p) in in_group}
    assert set(servers[1.0].lr_scales) == {1.0} and len(scaled) < len(names)
    grads = [spread_grads(start, seed) for seed in (1, 2)]
    for server in servers.values():
        push = server.push_measured if measured else server.push
        push(grads[0], 0)
    for i, name in enumerate(names):
        at_one = (start[i] - servers[1.0].params[i]).double()
        at_s = (start[i] - servers[s].params[i]).double()
        if name in scaled:
            torch.testing.assert_close(at_s, s * at_one, rtol=1e-4, atol=0.0, msg=name)
            sign = lr * s * torch.sign(grads[0][i]).double()
            torch.testing.assert_close(at_s, sign, rtol=1e-3, atol=0.0, msg=name)
        else:
            assert torch.equal(servers[s].params[i], servers[1.0].params[i]), name
    for scale, server in servers.items():
        (server.push_measured if measured else server.push)(grads[1], 0)
        scales = [scale if n in scaled else 1.0 for n in names]
        want = adam_reference(start, grads, lr, scales)
        for name, got, expected in zip(names, server.params, want):
            torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=1e-7, msg=name)


@torch.no_grad()
def one_rate_adam_step(server, grads, lr, step, measured):
    """The shared Adam's step before the LSTM's share, as it was written (`_step` at
    11e5790): one rate for every parameter."""
    beta1, beta2 = server.betas
    bias1, bias2 = 1.0 - beta1**step, 1.0 - beta2**step
    for param, grad, m, v in zip(server.params, grads, server.exp_avg, server.exp_avg_sq):
        if grad is None:
            continue
        m.mul_(beta1).add_(grad, alpha=1.0 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denom = (v / bias2).sqrt_().add_(server.eps)
        if not measured:
            param.addcdiv_(m, denom, value=-lr / bias1)
        else:
            param.sub_((m / denom).mul_(lr / bias1))


@pytest.mark.parametrize("measured", [False, True])
def test_a3c_shared_adam_at_scale_one_is_bit_for_bit_the_one_rate_step(measured):
    """At `lstm_lr_scale=1` (every A3C preset) the shared Adam's updates, with the rate
    decaying over the frames of two workers, equal bit for bit those of the one-rate step
    it had before the share (a parameter without a gradient left as it is)."""
    from gazelle.algorithms.a3c.shared_adam import SharedAdamServer
    from gazelle.runtime.schedule import LinearDecay

    agent = small_lstm_agent(3)
    made = [
        SharedAdamServer(copy.deepcopy(agent), 2, lr=0.01, eps=EPS,
                         schedule=LinearDecay.fresh(0.01, 5000), lstm_lr_scale=1.0)
        for _ in "ab"
    ]  # fmt: skip
    server, old = made
    for update in range(6):
        grads: list[torch.Tensor | None] = list(spread_grads(server.params, 10 + update))
        grads[update % len(grads)] = None
        worker = update % 2
        lr = old.learning_rate()
        old.steps[worker] += 1
        one_rate_adam_step(old, grads, lr, old.step_count, measured)
        (server.push_measured if measured else server.push)(grads, worker)
        for s_ in (server, old):
            s_.add_frames(worker, 700)
        for got, want in zip(server.params, old.params):
            assert torch.equal(got, want)
    assert server.learning_rate() < 0.01 and server.step_count == 6
    assert not torch.equal(server.params[0], next(agent.parameters()))


def test_the_a3c_flag_reaches_the_shared_adam():
    """`gazelle train --algo a3c --use-lstm --lstm-lr-scale 0.5`: the config holds 0.5 once
    resolved, the shared Adam the loop builds from it steps the core and the policy head at
    0.5, and the first log line names it. Without the flag a vector task gets the vector
    preset's tenth (and the control preset, its copy); every image preset, and every
    family of the seed's own preset, leaves it at 1."""
    from gazelle.algorithms.a3c.loop import shared_adam
    from gazelle.algorithms.a3c.presets import A3C_PRESETS
    from gazelle.algorithms.a3c.report import describe
    from gazelle.cli import build_parser, config_from_args
    from gazelle.config import resolve
    from gazelle.envs.probe import EnvProbe

    argv = ["train", "--algo", "a3c", "--env", "CartPole-v1", "--use-lstm",
            "--lstm-lr-scale", "0.5", "--logdir", "x"]  # fmt: skip
    probe = EnvProbe(["CartPole-v1"], A3C_SPEC, 1, "gym")
    config = resolve(config_from_args(build_parser().parse_args(argv)), probe)
    assert config.algo == "a3c" and config.a3c.lstm_lr_scale == 0.5
    server = shared_adam(config, 2)(small_lstm_agent())
    assert sorted(set(server.lr_scales)) == [0.5, 1.0]
    assert " adam lr=0.002 lstm_lr_scale=0.5 " in describe(config, 2)
    default = resolve(config_from_args(build_parser().parse_args(argv[:6] + argv[8:])), probe)
    assert default.a3c.lstm_lr_scale == 0.1
    assert sorted(set(shared_adam(default, 2)(small_lstm_agent()).lr_scales)) == [0.1, 1.0]
    for preset, families in A3C_PRESETS.items():
        shares = {family: values["lstm_lr_scale"] for family, values in families.items()}
        tenth = {"vector", "control"} if preset == "gazelle" else set()  # universe-starter: 1
        assert {f for f, share in shares.items() if share != 1.0} == tenth, (preset, shares)
        assert all(shares[f] == 0.1 for f in tenth)


@pytest.mark.parametrize(
    ("value", "named", "allowed"),
    [("0", "0.0", "a positive number"), ("-0.5", "-0.5", "a positive number"),
     ("5000", "5000.0", "a number in [0.0, 1000.0]"), ("nan", "'nan'", "a finite number")],
)  # fmt: skip
def test_a_bad_a3c_lstm_lr_scale_is_one_line_naming_the_flag(
    value, named, allowed, tmp_path, capsys
):
    """As IMPALA's: the flag, the bad value and what is allowed, in one line (a short
    budget: a value let through runs briefly and fails the test, not for 1.5M frames)."""
    from gazelle.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--algo", "a3c", "--env", "CartPole-v1", "--use-lstm",
              "--lstm-lr-scale", value, "--total-frames", "100", "--quiet",
              "--logdir", str(tmp_path / "run")])  # fmt: skip
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert f"--lstm-lr-scale: invalid value {named}; allowed: {allowed}" in err, err


def test_an_a3c_run_saved_before_the_share_resumes_at_one_rate():
    from gazelle.algorithms.runstate import saved_config
    from gazelle.config import Config

    data = Config.of(algo="a3c", env="CartPole-v1", use_lstm=True, lstm_lr_scale=0.1).to_dict()
    data["a3c"].pop("lstm_lr_scale")
    assert saved_config(data).a3c.lstm_lr_scale == 1.0
    kept = Config.of(algo="a3c", env="CartPole-v1", use_lstm=True, lstm_lr_scale=0.1)
    assert saved_config(kept.to_dict()).a3c.lstm_lr_scale == 0.1


@pytest.mark.slow
def test_an_a3c_run_takes_the_flag_and_one_saved_before_it_resumes(tmp_path, capsys):
    """A real run: `--algo a3c --use-lstm --lstm-lr-scale 0.1` is in its first line and its
    saved config; the same run made to look saved before the flag (the field gone from its
    config.json and its checkpoint) resumes, its shared Adam's moments loaded, at one rate."""
    from gazelle import checkpoint
    from gazelle.cli import main

    logdir = tmp_path / "run"
    assert main(["train", "--algo", "a3c", "--env", "CartPole-v1", "--use-lstm",
                 "--lstm-lr-scale", "0.1", "--total-frames", "1000", "--quiet",
                 "--logdir", str(logdir)]) == 0  # fmt: skip
    assert " lstm_lr_scale=0.1 " in capsys.readouterr().out
    saved = json.loads((logdir / "config.json").read_text())
    assert saved["a3c"]["lstm_lr_scale"] == 0.1
    saved["a3c"].pop("lstm_lr_scale")
    (logdir / "config.json").write_text(json.dumps(saved))
    state = checkpoint.load(logdir / "checkpoint.pt")
    state["config"]["a3c"].pop("lstm_lr_scale")
    checkpoint.save(logdir / "checkpoint.pt", state)
    updates = int(state["optimizer"]["steps"].sum())
    assert main(["train", "--logdir", str(logdir), "--total-frames", "2000", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "gazelle: resumed from" in out and " lstm_lr_scale=1 " in out, out
    assert json.loads((logdir / "config.json").read_text())["a3c"]["lstm_lr_scale"] == 1.0
    assert int(checkpoint.load(logdir / "checkpoint.pt")["optimizer"]["steps"].sum()) > updates
