"""`--learners N`: two learner processes (gloo on loopback, spawned) with half the batch each
take the same optimiser steps as one learner with the whole batch, for IMPALA's V-trace and
for APPO's passes (minibatches, normalised advantages, PopArt, the learner's anchor,
observation statistics); a learner that stops answering ends the step within the timeout,
naming itself; and the checks of the flag."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

import gazelle.algorithms.appo.loop as appo_loop
from gazelle.algorithms.common import prepare
from gazelle.algorithms.impala import ranks
from gazelle.algorithms.impala.build import make_learner, new_agent, step_targets_of, vtrace_loss
from gazelle.algorithms.impala.passes import anchors_at_learner, train_on_batch, units_of
from gazelle.backends.collective import LearnerLost
from gazelle.config import Config, ConfigError, validate

T, B = 5, 8


def resolved(tmp_path, **flags):
    """A resolved CartPole config (one actor: no layout measurement)."""
    values = {"env": "CartPole-v1", "num_actors": 1, "batch_size": B, "unroll_length": T}
    values.update(logdir=str(tmp_path), device="cpu", learners=2, **flags)
    config, found, _ = prepare(Config.from_flat(values))
    return config, found


def make_batch(agent, seed):
    """A `[T+1, B]` batch of the agent's observation fields, actions, rewards and ends,
    with behaviour logits near the agent's (off-policy enough for V-trace's clipping)."""
    g = torch.Generator().manual_seed(seed)
    spec = agent.obs_spec
    batch = {
        name: torch.randn(T + 1, B, *spec.field(name).shape, generator=g) for name in spec.names
    }
    actions = spec.num_actions
    batch.update(
        action=torch.randint(0, actions, (T + 1, B), generator=g),
        reward=torch.randn(T + 1, B, generator=g),
        terminated=torch.rand(T + 1, B, generator=g) < 0.1,
        truncated=torch.rand(T + 1, B, generator=g) < 0.05,
        truncation_value=torch.randn(T + 1, B, generator=g),
        policy_logits=torch.randn(T + 1, B, actions, generator=g) * 0.3,
        policy_version=torch.zeros(B, dtype=torch.int64),
        level_id=torch.zeros(B, dtype=torch.int64),
    )
    state = agent.initial_state(B)
    if state:
        batch["state_h"], batch["state_c"] = (torch.randn(s.shape, generator=g) for s in state)
    return batch


def view(config, learner):
    """What `train_on_batch` reads of a run."""
    section = config.algorithm
    epochs, minibatches = getattr(section, "epochs", None), getattr(section, "minibatches", None)
    anchor = anchors_at_learner(section)
    return SimpleNamespace(
        learner=learner, passes=(epochs or 1, minibatches or 1), anchor_at_learner=anchor,
        step_targets=step_targets_of(config),
    )  # fmt: skip


def _make_loss(config):
    return appo_loop.make_loss if config.algo == "appo" else vtrace_loss


CASES = {
    "impala-vtrace-lstm": {"algo": "impala", "use_lstm": True, "grad_norm_clip": 0.5},
    "appo-passes": {
        "algo": "appo", "epochs": 2, "minibatches": 2, "normalize_advantages": True,
        "popart": True, "clip_anchor": "learner", "normalize_obs": True, "use_lstm": False,
        "targets": "batch",  # why: V_0 and pi_0 from each learner's own pass on the batch
    },
    # each learner takes every epoch's targets on the whole batch, then trains on its half
    # of each minibatch of single steps
    "appo-steps": {
        "algo": "appo", "epochs": 2, "minibatches": 4, "minibatch_unit": "step",
        "normalize_advantages": True, "popart": True, "clip_anchor": "learner",
        "normalize_obs": True, "use_lstm": False, "targets": "step",
    },
}  # fmt: skip


def check_equivalence(config, found, one, one_agent, two, two_agent, start):
    """Four batches (the second with a NaN in learner 1's half: skipped by both, as by one
    learner) on one learner and on two; the same metrics and, at the end, the same weights
    and buffers, all moved."""
    for k in range(4):
        batch = make_batch(one_agent, seed=k)
        if k == 1:
            batch["truncation_value"][2, B - 1] = float("nan")  # why: a non-finite loss
        # why: the same deal of APPO's minibatches for both
        units = units_of(batch, one.step_targets is not None)
        orders = None if one.passes == (1, 1) else [torch.randperm(units) for _ in range(2)]
        want = train_on_batch(one, batch, 0.01, orders)
        got = train_on_batch(two, batch, 0.01, orders)
        assert float(got["learner/skipped"]) == float(want["learner/skipped"]) == float(k == 1)
        assert {n for n in got if n.startswith("learner/")} == {
            n for n in want if n.startswith("learner/")
        }  # the same reason for a skip (learner/nonfinite_loss)
        # the logged metrics read as one learner's: summed losses, the batch's norm
        for name in ("losses/grad_norm", "losses/total", "losses/baseline"):
            if k != 1:
                assert got[name] == pytest.approx(float(want[name]), rel=1e-4), name
    want_state, got_state = one_agent.state_dict(), two_agent.state_dict()
    for name, value in want_state.items():
        torch.testing.assert_close(got_state[name], value, rtol=1e-5, atol=1e-6)
    # the steps moved every weight (an equality of two unchanged agents proves nothing)
    assert all(not torch.equal(want_state[n], start[n]) for n, _ in one_agent.named_parameters())


@contextlib.contextmanager
def one_and_two(tmp_path, monkeypatch, **flags):
    """One learner, and two learners (rank 1 spawned) from the same weights."""
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)  # why: rank 0 (here) sets it
    config, found = resolved(tmp_path, **flags)
    cpu = torch.device("cpu")
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    one_agent = new_agent(config, found.obs_spec, 1, cpu)
    one = view(config, make_learner(config, one_agent, cpu, make_loss=_make_loss(config)))
    two_agent = copy.deepcopy(one_agent)
    start = copy.deepcopy(one_agent.state_dict())
    learners = ranks.start(config, found, cpu, make_loss=_make_loss(config))
    try:
        collective = learners.collective
        two_learner = make_learner(config, two_agent, cpu, None, _make_loss(config), collective)
        two = SimpleNamespace(learners=learners, **vars(view(config, two_learner)))
        # why: a second learner that starts from other weights would be caught here too.
        ranks.send_start(collective, two_agent, two_learner.optimizer)
        yield config, found, one, one_agent, two, two_agent, start
    finally:
        learners.close(timeout=1.0)
        torch.set_num_threads(threads)


@pytest.mark.parametrize("case", ["appo-passes", "appo-steps"])
def test_two_appo_learners_with_half_the_batch_each_step_as_one_learner_with_all(
    tmp_path, monkeypatch, case
):
    """APPO's passes: two epochs of minibatches (of unrolls, or of single steps), normalised
    advantages, PopArt, the learner's anchor and normalised observations, each minibatch
    halved."""
    with one_and_two(tmp_path, monkeypatch, **CASES[case]) as parts:
        check_equivalence(*parts)


def test_two_impala_learners_step_as_one_and_a_stopped_one_ends_the_step_in_time(
    tmp_path, monkeypatch
):
    """V-trace with the LSTM and a clip that bites: two learners with half the batch each
    step as one learner with all of it. Then (on the same group, to spare CI a second
    start) learner 1 is stopped (SIGSTOP: alive, its connections open, so nothing closes):
    only the group's timeout ends learner 0's wait, and the reason names learner 1."""
    flags = {**CASES["impala-vtrace-lstm"], "learner_timeout_s": 2.0}
    with one_and_two(tmp_path, monkeypatch, **flags) as parts:
        check_equivalence(*parts)
        two, two_agent = parts[4], parts[5]
        stopped = learner_pid(os.getpid(), 1)
        assert stopped is not None
        os.kill(stopped, signal.SIGSTOP)
        try:
            start = time.monotonic()
            with pytest.raises(LearnerLost) as caught, ranks.learner_faults(two):
                train_on_batch(two, make_batch(two_agent, seed=9), 0.01)
            assert time.monotonic() - start < 2.0 + 5.0
            assert f"learner 1 (pid {stopped}) is stopped" in str(caught.value)
            assert "\n" not in str(caught.value)
        finally:
            os.kill(stopped, signal.SIGCONT)


def learner_pid(parent: int, rank: int) -> int | None:
    """The pid of learner `rank` among `parent`'s children (named by `name_process`)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/comm") as comm:
                name = comm.read().strip()
        except OSError:
            continue
        if int(fields[1]) == parent and name == f"gazelle-learn{rank}":
            return int(entry)
    return None


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the learner through /proc")
def test_cli_run_with_two_learners_checkpoints_stops_when_one_is_killed_and_resumes(
    tmp_path, capsys
):
    """`gazelle train --learners 2` (in a clean environment: no GLOO_SOCKET_IFNAME) trains,
    listening on loopback only, and checkpoints; SIGKILL of learner 1 ends it within a
    bounded time with one line naming it; its checkpoint resumes with one learner."""
    from gazelle import api
    from gazelle.algorithms.runstate import CHECKPOINT_FILE, CONFIG_FILE, saved_config
    from gazelle.backends.ray.sockets import is_loopback, tree
    from gazelle.plot.runs import read_rows

    logdir = tmp_path / "run"
    flags = ["--env", "CartPole-v1", "--learners", "2", "--num-actors", "1",
             "--batch-size", "4", "--unroll-length", "20", "--total-frames", "10000000",
             "--checkpoint-interval-s", "1", "--log-interval-s", "0.5", "--logdir",
             str(logdir), "--quiet", "--seed", "3"]  # fmt: skip
    out = tmp_path / "out.txt"
    env = {name: os.environ[name] for name in ("PATH", "HOME", "PYTHONPATH") if name in os.environ}
    with open(out, "w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "gazelle.cli", "train", *flags],
            stdout=sink,
            stderr=sink,
            env=env,
        )
    try:
        deadline = time.monotonic() + 90
        frames, pid = 0, None
        progress = logdir / "progress.jsonl"
        # why: a few thousand frames trained by both learners and a checkpoint on disk first
        while frames < 2000 or not (logdir / CHECKPOINT_FILE).exists() or pid is None:
            assert process.poll() is None, out.read_text()
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.2)
            rows = read_rows(progress) if progress.exists() else []
            frames = int(rows[-1]["frames"]) if rows else 0
            pid = pid or learner_pid(process.pid, 1)
        # every socket the run listens on (store, gloo) is on loopback, as `ss` shows them
        lines = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout
        pids = tree(process.pid)
        listens = [
            line.split()[3] for line in lines.splitlines() if any(f"pid={p}," in line for p in pids)
        ]
        assert any(f"pid={pid}," in line for line in lines.splitlines()), lines  # gloo's
        assert listens and all(is_loopback(a.rsplit(":", 1)[0]) for a in listens), listens
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        # why: bounded: the step's all-reduce fails at once on the closed connection, or
        # the loop's check sees the exit within a second while it waits for a batch.
        code = process.wait(timeout=60)
        took = time.monotonic() - killed
    finally:
        if process.poll() is None:
            process.kill()
    text = out.read_text()
    reason = f"learner 1 (pid {pid}) was killed by SIGKILL; the run stops"
    assert code == 1 and took < 30, text
    assert [line for line in text.splitlines() if reason in line], text
    assert "Traceback" not in text
    saved = read_rows(logdir / "progress.jsonl")[-1]["frames"]
    # a different number of learners resumes the checkpoint the killed run left (the run's
    # own config, as `gazelle train --logdir` reads it)
    config = saved_config(json.loads((logdir / CONFIG_FILE).read_text()))
    capsys.readouterr()
    result = api.train(config, total_frames=saved + 200, learners=1, quiet=True)
    assert f"resumed from {logdir / CHECKPOINT_FILE} at {saved:,} frames" in capsys.readouterr().out
    assert result.frames >= saved + 200


@pytest.mark.parametrize(
    ("flags", "flag", "names"),
    [
        ({"learners": 0}, "--learners", ["0", "a positive integer"]),
        ({"learners": 3, "batch_size": 32}, "--batch-size", ["32", "--learners (3"]),
        ({"algo": "appo", "learners": 2, "batch_size": 12, "minibatches": 4}, "--minibatches",
         ["3 unrolls", "--learners (2)"]),
        ({"algo": "a3c", "learners": 2}, "--learners", ["its workers", "--num-actors"]),
        ({"learners": 2, "max_policy_lag": 3}, "--max-policy-lag", ["--learners 2"]),
        ({"learner_timeout_s": 0}, "--learner-timeout-s", ["a positive number"]),
    ],
)  # fmt: skip
def test_bad_learner_settings_are_refused_naming_the_flag_and_values(flags, flag, names):
    with pytest.raises(ConfigError) as caught:
        validate(Config.from_flat({"env": "CartPole-v1", **flags}))
    message = str(caught.value)
    assert message.startswith(flag + ":"), message
    for name in names:
        assert name in message, message


def test_a_backend_that_runs_one_learner_refuses_more_naming_those_that_run_several():
    """`--backend ray` and `local` run several learners; a backend without `build_learners`
    (the registry's toy `threads`) refuses `--learners 2` naming them."""
    import toy_backend
    from gazelle.config import registry

    validate(Config.from_flat({"env": "CartPole-v1", "learners": 2, "backend": "ray"}))
    registry.register_backend(toy_backend.THREADS)
    try:
        with pytest.raises(ConfigError) as caught:
            validate(Config.from_flat({"env": "CartPole-v1", "learners": 2, "backend": "threads"}))
    finally:
        registry.unregister("threads")
    message = str(caught.value)
    assert message.startswith("--learners:") and "--backend threads" in message, message
    assert "--backend local | ray" in message, message


def test_one_learner_makes_no_process_group(tmp_path):
    """The default (`--learners 1`) starts nothing and steps as before: no collective."""
    import torch.distributed as dist

    from gazelle.algorithms.impala.build import build

    config = Config.from_flat(
        {"env": "CartPole-v1", "num_actors": 1, "batch_size": 4, "logdir": str(tmp_path)}
    )
    run = build(config)
    try:
        assert run.learners is None and run.learner.collective is None
        assert not dist.is_initialized()
    finally:
        run.transport.fleet.close()


def test_a_run_saved_before_the_flag_reads_as_one_learner():
    from gazelle.algorithms.runstate import saved_config

    data = Config.from_flat({"env": "CartPole-v1", "learners": 2}).to_dict()
    del data["run"]["learners"], data["run"]["learner_timeout_s"]
    assert saved_config(data).run.learners == 1


def test_a_loss_that_cannot_reach_the_other_learners_is_refused_before_any_starts(tmp_path):
    config, found = resolved(tmp_path)
    with pytest.raises(ValueError, match=r"--learners 2: the loss .* must be picklable"):
        ranks.start(config, found, torch.device("cpu"), loss_fn=lambda agent, batch: None)


def test_the_rendezvous_listens_on_loopback_or_the_driver_s_cluster_address_never_on_all(
    monkeypatch,
):
    """The store's address (`collective.listen`, `ray.learners.rendezvous_host`) and the
    interface gloo binds (`group_interface`), without a cluster: a loopback Ray's driver
    listens on 127.0.0.1 and binds loopback, a cluster's on its own address; an unspecified
    address is refused, and so is a cluster address no interface of this node holds."""
    from gazelle.backends.collective import interface_of, listen, loopback_interface
    from gazelle.backends.ray.learners import group_interface, rendezvous_host
    from gazelle.errors import RunError

    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(name, raising=False)  # why: a user's own would be kept
    for host in ("0.0.0.0", "::"):
        with pytest.raises(ValueError, match="never listens on"):
            listen(host)
        with pytest.raises(RunError, match="never listens on every interface"):
            rendezvous_host(host)
    assert rendezvous_host("127.0.0.1") == rendezvous_host("::1") == "127.0.0.1"
    assert rendezvous_host("10.0.0.5") == "10.0.0.5"
    assert interface_of("127.0.0.1") == loopback_interface() == group_interface("127.0.0.1", "x")
    assert interface_of("198.51.100.7") is None  # TEST-NET-2: no interface holds it
    with pytest.raises(RunError, match="GLOO_SOCKET_IFNAME"):
        group_interface("198.51.100.7", "198.51.100.7")


class _Planted:
    """A pickle that creates a file when unpickled (what a local user could plant)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_what_a_learner_reads_from_the_store_is_never_unpickled(tmp_path, monkeypatch):
    """Anyone on the machine can reach the loopback store (it has no token): a message
    planted there is refused, never run (the learners' messages load as plain data)."""
    import pickle

    import torch.distributed as dist

    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)  # why: the group sets it
    from gazelle.backends.collective import (
        MESSAGE_KEY,
        ProcessGroupCollective,
        client_store,
        listen,
        serve_store,
    )

    server = listen("127.0.0.1")
    port = server.getsockname()[1]
    store = serve_store(server, 1, 10.0)
    collective = ProcessGroupCollective(store, 0, 1, torch.device("cpu"), 10.0, interface="lo")
    try:
        collective.post({"lr": 0.5, "orders": [torch.arange(3)]})
        assert collective.next_message()["lr"] == 0.5  # plain data comes through
        planted = tmp_path / "planted"
        client_store("127.0.0.1", port, 1, 10.0).set(
            MESSAGE_KEY.format(1), pickle.dumps(_Planted(planted))
        )
        with pytest.raises(pickle.UnpicklingError):
            collective.next_message()
        assert not planted.exists()
    finally:
        collective.close()
        assert not dist.is_initialized()
