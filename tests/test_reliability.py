"""Faults that must stop nothing and leave nothing behind, on real processes: a stopped
(hung) actor is found by its heartbeat, killed and replaced; a learner without data says
which actors are silent; a trainer killed with SIGKILL leaves no process and no shared-memory
segment behind."""

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium
import numpy as np
import pytest

from gazelle.algorithms.impala import train


def actor_pids():
    return [p.pid for p in multiprocessing.active_children() if p.name.startswith("gazelle-actor-")]


@pytest.mark.slow
def test_a_stopped_actor_is_found_killed_and_replaced(small_config, capsys, monkeypatch):
    from gazelle.backends.local import process

    stopped: list[int] = []
    printed: list[str] = []
    replaced_at: list[int] = []

    def stop_one(progress):
        if not stopped and progress["frames"] >= 2_000:
            pid = actor_pids()[0]
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        elif stopped:
            printed.append(capsys.readouterr().out)
            if not replaced_at and "killed; it is replaced" in "".join(printed):
                replaced_at.append(progress["frames"])
            # why: what this test is about has happened, and training went on after it.
            if replaced_at and progress["frames"] >= replaced_at[0] + 2_000:
                raise KeyboardInterrupt

    # why: the run ends on the replacement, not on a frame budget. The stopped actor may not
    # have beaten yet (a busy machine can start one actor seconds after the other, which then
    # makes the 2,000 frames alone); then the start allowance applies, here 20 s instead of
    # 120 (START_TIMEOUT_S is tested below), so the other actor must not finish the run first.
    monkeypatch.setattr(process, "START_TIMEOUT_S", 20.0)
    config = small_config(total_frames=10**8, max_seconds=150, actor_timeout_s=3.0,
                          log_interval_s=0.3)  # fmt: skip
    result = train(config, on_progress=stop_one)
    out = "".join(printed) + capsys.readouterr().out
    assert stopped and replaced_at and result.interrupted, out[-3000:]
    assert result.actor_restarts >= 1 and result.frames >= replaced_at[0] + 2_000
    assert "gave no sign of life for" in out and "killed; it is replaced" in out
    with pytest.raises(ProcessLookupError):
        os.kill(stopped[0], 0)  # the stopped process is gone, not left behind


def slow_to_start_cartpole(delay_s: float):
    """CartPole that takes `delay_s` to build in an actor process (as a heavy env or a
    busy machine's torch import does); at once in the trainer's own probe."""
    if multiprocessing.current_process().name.startswith("gazelle-"):
        time.sleep(delay_s)
    return gymnasium.make("CartPole-v1")


@pytest.mark.slow
def test_a_slow_start_is_not_a_hang(small_config):
    """Actors that need 5 s to their first heartbeat, with --actor-timeout-s 2, are left to
    start (inside START_TIMEOUT_S): no restart, and the run gets its frames."""
    import gazelle

    gazelle.register_env("SlowStart-v0", slow_to_start_cartpole, kwargs={"delay_s": 5.0})
    config = small_config(env="SlowStart-v0", total_frames=2_000, actor_timeout_s=2.0)
    result = train(config)
    assert result.actor_restarts == 0 and result.frames >= 2_000


class _Running:
    """A process that is alive until killed (no pid: no process group to kill)."""

    pid = None

    def __init__(self):
        self.killed = False

    def is_alive(self):
        return not self.killed

    def kill(self):
        self.killed = True

    def join(self, timeout=None):
        pass


@pytest.mark.parametrize(
    ("beaten_s_ago", "started_s_ago", "start_timeout_s", "killed"),
    [
        (None, 10.0, 60.0, False),  # starting, inside the allowance
        (None, 10.0, 5.0, True),  # starting, past the allowance
        (3.0, 10.0, 60.0, True),  # beat once, then silent past --actor-timeout-s
        (1.0, 10.0, 60.0, False),  # beating
    ],
)
def test_the_hang_clock_gives_a_start_allowance_then_the_actor_timeout(
    monkeypatch, beaten_s_ago, started_s_ago, start_timeout_s, killed
):
    from types import SimpleNamespace

    from gazelle.backends.local import process

    monkeypatch.setattr(process, "START_TIMEOUT_S", start_timeout_s)
    fleet = process.ProcessFleet([SimpleNamespace(actor_id=0, seed=0)], actor_timeout_s=2.0)
    now = time.monotonic()
    fleet.processes = [_Running()]
    fleet.started_at[0] = now - started_s_ago
    fleet.heartbeats[0] = now - (started_s_ago if beaten_s_ago is None else beaten_s_ago)
    events = fleet._kill_hung()
    assert fleet.processes[0].killed is killed
    assert [e["type"] for e in events] == (["actor_hung"] if killed else [])


@pytest.mark.slow
def test_a_learner_without_batches_names_the_silent_actors(small_config):
    def stop_all(progress):
        for pid in actor_pids():
            os.kill(pid, signal.SIGSTOP)

    # why: the actors' timeout is longer than the learner's, so the learner reports them.
    config = small_config(
        total_frames=10**6, actor_timeout_s=600.0, batch_timeout_s=4.0, log_interval_s=0.3
    )
    with pytest.raises(TimeoutError) as err:
        train(config, on_progress=stop_all)
    message = str(err.value)
    assert "no batch for" in message and "--batch-timeout-s" in message
    assert "actor 0: alive, last sign of life" in message and "actor 1:" in message


def shm_entries():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def children_of(pid):
    """Pids of the processes whose parent is `pid` (the actors and the resource tracker)."""
    out = subprocess.run(["ps", "-eo", "pid,ppid"], capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines()[1:]]
    return [int(child) for child, parent in rows if parent == str(pid)]


@pytest.mark.slow
def test_a_trainer_killed_with_sigkill_leaves_nothing_behind_and_resumes(tmp_path):
    """`gazelle train` (local backend, IMPALA, `--checkpoint-interval-s 1`) SIGKILLed mid-run,
    after two periodic checkpoints: its actors exit and no shared memory outlives it; the
    last checkpoint was at most one interval (plus a save) old; a second run on its logdir
    while it lived was refused in one line naming its pid; the same command resumes from
    the checkpoint and takes over the dead run's lock."""
    import shutil

    before_shm = shm_entries()
    gazelle = shutil.which("gazelle")
    command = [gazelle] if gazelle else [sys.executable, "-m", "gazelle.cli"]
    interval = 1.0
    args = ["train", "--env", "CartPole-v1", "--num-actors", "2", "--envs-per-actor", "2",
            "--batch-size", "2", "--unroll-length", "10", "--log-interval-s", "0.2",
            "--checkpoint-interval-s", str(interval), "--logdir", str(tmp_path)]  # fmt: skip
    proc = subprocess.Popen(
        [*command, *args, "--total-frames", "1000000000"], stdout=subprocess.DEVNULL
    )
    ckpt = Path(tmp_path) / "checkpoint.pt"
    saves: set[float] = set()
    start = time.monotonic()
    while not (ckpt.exists() and saves.add(ckpt.stat().st_mtime) is None and len(saves) >= 2):
        assert time.monotonic() - start < 120 and proc.poll() is None
        time.sleep(0.1)
    second = subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr[-2000:]
    assert f"another run is training in {tmp_path} (pid {proc.pid}" in second.stderr
    children = children_of(proc.pid)
    assert len(children) >= 2  # the actors (and the resource tracker)
    age = time.time() - ckpt.stat().st_mtime
    proc.kill()
    proc.wait()
    assert age <= interval + 1.0, age  # at most one checkpoint interval lost
    deadline = time.monotonic() + 10.0
    alive = children
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [pid for pid in children if _alive(pid)]
    assert not alive, f"processes outlived the killed trainer: {alive}"
    leaked = orphaned(shm_entries() - before_shm)
    deadline = time.monotonic() + 10.0
    while leaked and time.monotonic() < deadline:
        time.sleep(0.2)
        leaked = orphaned(shm_entries() - before_shm)
    assert not leaked, f"shared memory left behind: {sorted(leaked)}"
    from gazelle.checkpoint import load

    saved = int(load(ckpt)["frames"])
    resumed = subprocess.run(
        [*command, *args, "--total-frames", str(saved + 1000)], capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {ckpt} at {saved:,} frames" in resumed.stdout, resumed.stdout[-2000:]
    assert f"(pid {proc.pid}, killed?)" in resumed.stdout
    assert int(load(ckpt)["frames"]) >= saved + 1000


def _gazelle_children(pid):
    """The children of `pid` that run gazelle code (not multiprocessing's resource tracker)."""
    found = []
    for child in children_of(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            found.append(child)
    return found


def _leads_its_group(pid):
    """Whether process `pid` leads its own process group (a gone one does not)."""
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _trained(progress):
    """Whether a row of `progress` (a progress.jsonl) counts frames."""
    if not progress.exists():
        return False
    return any(json.loads(line)["frames"] > 0 for line in progress.read_text().splitlines()[:-1])


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["impala", "a3c"])
def test_a_trainer_killed_with_sigkill_takes_a_stopped_child_with_it(tmp_path, algo):
    """A child stopped with SIGSTOP (or blocked in an env) never looks at its parent pid; it
    dies with the trainer only because the kernel kills it (PR_SET_PDEATHSIG)."""
    sizes = "batch_size=2, " if algo == "impala" else ""
    script = (
        "from gazelle.algorithms import train\n"
        "from gazelle.config import Config\n"
        f"train(Config.of(algo={algo!r}, env='CartPole-v1', num_actors=2, envs_per_actor=2,"
        f" {sizes}unroll_length=10, total_frames=10**9, logdir={str(tmp_path)!r},"
        " log_interval_s=0.2))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL)
    children = []
    try:
        progress = Path(tmp_path) / "progress.jsonl"
        start = time.monotonic()
        # why: until the children train (a row with frames): a child still starting (its
        # imports take ~10-60 s on a loaded machine) has not asked for the signal yet; it
        # exits when it does (`die_with_parent` finds its parent gone). Generous, for load.
        while not _trained(progress):
            assert time.monotonic() - start < 300 and proc.poll() is None
            time.sleep(0.2)
        children = _gazelle_children(proc.pid)
        assert len(children) == 2, children  # the two actors (or workers)
        # why: the frames may all come from one child while the other still imports; stopped
        # there, before its PR_SET_PDEATHSIG, nothing could end it (a CI run failed so). A
        # child leads its own process group right after asking for the signal
        # (`child_main`), so wait until both do.
        while not all(_leads_its_group(pid) for pid in children):
            assert time.monotonic() - start < 300 and proc.poll() is None
            time.sleep(0.2)
        os.kill(children[0], signal.SIGSTOP)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10.0
        alive = children
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [pid for pid in children if _alive(pid)]
        assert not alive, f"processes outlived the killed trainer: {alive}"
    finally:
        proc.kill()
        for pid in children:  # why: a failed run of this test must not leave them behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def orphaned(names):
    """The /dev/shm entries among `names` that no live process has open or mapped (others
    belong to whatever else runs on the machine meanwhile)."""
    used = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            used.update(line.rsplit("/", 1)[-1] for line in (proc / "maps").read_text().splitlines()
                        if "/dev/shm/" in line)  # fmt: skip
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    used.add(target.rsplit("/", 1)[-1])
        except (OSError, PermissionError):
            continue
    return {name for name in names if name not in used and (Path("/dev/shm") / name).exists()}


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for this purpose
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def ctrl_c_once(logdir, timeout_s=30.0):
    """Start a small training in its own process group, wait for its first progress rows,
    send SIGINT to the whole group (as a terminal's Ctrl-C does) and return (seconds it took
    to exit, exit code, pids of its children that outlived it)."""
    script = (
        "from gazelle.algorithms.impala import train\n"
        "from gazelle.config import Config\n"
        f"train(Config.of(env='CartPole-v1', num_actors=2, envs_per_actor=2, batch_size=2,"
        f" unroll_length=10, total_frames=10**9, logdir={str(logdir)!r},"
        " log_interval_s=0.2))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.DEVNULL, start_new_session=True
    )
    progress = Path(logdir) / "progress.jsonl"
    start = time.monotonic()
    while not (progress.exists() and progress.read_text().count("\n") >= 2):
        assert time.monotonic() - start < 120 and proc.poll() is None
        time.sleep(0.1)
    children = children_of(proc.pid)
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = None
    took = time.monotonic() - sent
    time.sleep(1.0)
    return took, code, [pid for pid in children if _alive(pid)]


@pytest.mark.slow
def test_ctrl_c_stops_training_promptly_and_leaves_nothing(tmp_path):
    took, code, left = ctrl_c_once(tmp_path)
    assert code == 0, f"exit code {code} after {took:.1f} s"
    assert took < 20.0 and not left
    from gazelle import checkpoint

    assert checkpoint.load(tmp_path / "checkpoint.pt")["frames"] > 0


class RaiseAt(gymnasium.Wrapper):
    """A real env whose step raises once, at step `at` of its first episode."""

    def __init__(self, env, at=3):
        super().__init__(env)
        self.at, self.t, self.raised = at, 0, False

    def step(self, action):
        self.t += 1
        if self.t == self.at and not self.raised:
            self.raised = True
            raise RuntimeError("the emulator fell over")
        return self.env.step(action)


@pytest.mark.parametrize("spec", ["CartPole-v1", "ALE/Pong-v5", "BabyAI-GoToRedBallGrey-v0"])
def test_an_env_that_raises_is_reset_and_counted(spec):
    from gazelle.envs import make
    from gazelle.envs.batch import SerialEnvs

    envs = SerialEnvs([lambda: RaiseAt(make(spec, seed=0)), lambda: make(spec, seed=1)])
    envs.reset()
    errors = []
    for _ in range(6):
        step = envs.step(np.zeros(2, np.int64))
        errors += step.errors
        if step.errors:
            assert step.truncated[0] and not step.game_over[0] and step.reward[0] == 0.0
    assert len(errors) == 1 and errors[0][0] == 0 and "the emulator fell over" in errors[0][1]
    envs.close()


@pytest.mark.slow
def test_an_only_actor_that_dies_before_the_first_batch_is_replaced(small_config, tmp_path):
    """Actors used to be replaced after a batch only: with its one actor dead before the
    first, the learner waited out --batch-timeout-s for a batch that could never come."""
    import runtime_children
    from gazelle.plugins import register_env

    marker = tmp_path / "died"
    register_env(
        "gazelle-test/DiesOnce-v0",
        runtime_children.cartpole_that_dies_once,
        kwargs={"marker": str(marker)},
        replace=True,
    )
    config = small_config(
        env="gazelle-test/DiesOnce-v0", num_actors=1, total_frames=2_000, batch_timeout_s=60.0
    )
    started = time.monotonic()
    result = train(config)
    assert marker.exists() and result.actor_restarts == 1
    assert result.frames >= 2_000 and time.monotonic() - started < 45


@pytest.mark.slow
def test_a_dying_batch_thread_fails_the_run_with_its_error_and_a_checkpoint(
    small_config, monkeypatch
):
    """The learner's prefetch thread (`runtime.learner.Prefetcher`) dies mid-run (its batch
    source raises): the run fails with that exception, not a wait for batches that never
    come, and the final checkpoint is written."""
    from gazelle.backends.local.buffers import UnrollBuffers
    from gazelle.checkpoint import load

    real = UnrollBuffers.batches

    def breaks_after_a_few(self, *args, **kwargs):
        for count, batch in enumerate(real(self, *args, **kwargs)):
            if count == 20:
                raise ValueError("the batch source broke on purpose")
            yield batch

    monkeypatch.setattr(UnrollBuffers, "batches", breaks_after_a_few)
    config = small_config(total_frames=10**8, max_seconds=120, batch_timeout_s=600.0)
    start = time.monotonic()
    with pytest.raises(ValueError, match="broke on purpose"):
        train(config)
    assert time.monotonic() - start < 100
    saved = load(Path(config.run.logdir) / "checkpoint.pt")
    assert saved["updates"] >= 20 and saved["frames"] == saved["updates"] * 40


@pytest.mark.slow
def test_a_dead_local_inference_server_fails_the_run_with_its_error_and_a_checkpoint(
    small_config, monkeypatch
):
    """Central inference on the local backend: the server's thread raises mid-run. The loop
    notices while it waits for a batch (`Fleet.check()`), and the run fails with the
    server's traceback instead of sitting at 0 frames/s until --batch-timeout-s; the final
    checkpoint is written."""
    from gazelle.backends.local.inference import InferenceServer
    from gazelle.checkpoint import load

    real, calls = InferenceServer._step, []

    def breaks_after_a_while(self, actors):
        calls.append(len(actors))
        if len(calls) > 200:
            raise ValueError("the inference server broke on purpose")
        return real(self, actors)

    monkeypatch.setattr(InferenceServer, "_step", breaks_after_a_while)
    config = small_config(
        inference="central", total_frames=10**8, max_seconds=120, batch_timeout_s=600.0
    )
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"inference server died(?s:.)*broke on purpose"):
        train(config)
    assert time.monotonic() - start < 60  # not the batch timeout (600 s)
    saved = load(Path(config.run.logdir) / "checkpoint.pt")
    assert saved["frames"] > 0
