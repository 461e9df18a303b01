"""The learners' process group (`--learners N`) on torch.distributed: what every backend that
runs several learners shares (the local backend's processes, Ray's learner actors),
whatever starts the processes and wherever the rendezvous is.

- Rendezvous: a `TCPStore` served by rank 0 on a socket it binds itself (`listen`), so it
  listens on the address given (127.0.0.1 for a one-machine run, the driver's cluster
  address on a Ray cluster) and not on every interface, as a store that binds its own port
  does (measured: torch 2.13's listens on `*:port`).
- Collectives: gloo on CPU, NCCL when each learner has its own GPU; their sockets on the
  interface given (`GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME`: loopback for a one-machine
  run, `interface_of` the cluster address on a cluster); every call has the group's
  timeout, and a member that dies breaks the others' calls at once (a closed connection).
- Messages: rank 0 posts each batch's header in the store; the others wait for it there,
  as long as rank 0 lives (docs/distributed.md).
- Start-up: spawning a learner and building its agent take seconds on a busy machine, far
  more than a step's collective call; the learners' start is bounded by `START_TIMEOUT_S`
  (or the group's timeout if longer), and a `barrier` in the store, which names the
  learners that did not come, separates it from the steps.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import ipaddress
import os
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from gazelle.errors import RunError

#: The store key of rank 0's `k`-th message (`ProcessGroupCollective.post`).
MESSAGE_KEY = "gazelle/message/{}"
#: The store key a learner sets once it is up (before the group forms).
READY_KEY = "gazelle/ready/{}"
#: The store key of a learner's arrival at the `k`-th barrier.
BARRIER_KEY = "gazelle/barrier/{}/{}"
#: The least time the learners get to start and reach their first barrier (a process's
#: spawn and torch's import on a busy machine; as the actors' start allowance).
START_TIMEOUT_S = 120.0


def start_timeout(timeout_s: float) -> float:
    """The learners' start-up bound for a group whose calls time out after `timeout_s`."""
    return max(timeout_s, START_TIMEOUT_S)


class LearnerLost(RunError):
    """A learner of the run died or stopped answering; `str()` names it, in one line."""


def learner_lost(
    err: BaseException,
    dead: Callable[[], list[str]],
    stopped: Callable[[], list[str]],
    timeout_s: float,
    notice_s: float,
) -> LearnerLost | None:
    """What a failed step says of the learners (a backend's `Learners.lost`): a
    `LearnerLost` naming the dead (`dead()`: one line each) or stopped (`stopped()`) ones,
    or the timeout when none is; None when `err` is the step's own error (a bug)."""
    if isinstance(err, LearnerLost):
        return err
    if not dead() and not collective_failure(err):
        return None  # why: an error of the step itself (a bug), not of the learners
    # why: a peer's death breaks the call at once, but its backend may report it (an exit
    # status, Ray's actor state) a moment after the closed socket.
    deadline = time.monotonic() + notice_s
    while not dead() and not stopped() and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = dead()
    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    if gone:
        return LearnerLost(f"{'; '.join(gone)}; the run stops ({first})")
    who = "; ".join(stopped()) or "every learner is alive, one did not answer"
    return LearnerLost(
        f"{who}: a collective call failed after at most --learner-timeout-s "
        f"{timeout_s:g} ({first}); the run stops"
    )


def loopback_interface() -> str:
    """The loopback interface's name (`lo` on Linux, `lo0` on macOS): gloo's sockets bind
    to it, so a one-machine run's learners never listen beyond this machine."""
    names = [name for _, name in socket.if_nameindex()]
    return next((name for name in ("lo", "lo0") if name in names), "lo")


#: `ioctl` request: an interface's IPv4 address (linux/sockios.h).
SIOCGIFADDR = 0x8915


def interface_of(host: str) -> str | None:
    """The name of the network interface that holds the IPv4 address `host` (Linux), so
    gloo's and NCCL's sockets bind that address only; None where it cannot be told."""
    if not sys.platform.startswith("linux"):
        return None
    import fcntl  # why: here, not at the top: Windows has no fcntl

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)
            except OSError:
                continue  # an interface without an IPv4 address
            if socket.inet_ntoa(answer[20:24]) == host:
                return name
    finally:
        probe.close()
    return None


def listen(host: str) -> socket.socket:
    """A listening TCP socket on `host` (an IPv4 or IPv6 address, never unspecified) and a
    free port the kernel picks (port 0)."""
    address = ipaddress.ip_address(host)
    if address.is_unspecified:
        # why: 0.0.0.0 or :: would listen on every interface, which the rendezvous never does
        raise ValueError(f"the learners' rendezvous never listens on {host}: name an address")
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    server = socket.socket(family, socket.SOCK_STREAM)
    server.bind((host, 0))
    server.listen(128)
    return server


def serve_store(server: socket.socket, size: int, timeout_s: float) -> dist.TCPStore:
    """Rank 0's store, served on `server` (`listen`): its address is the socket's."""
    host, port = server.getsockname()[:2]
    return dist.TCPStore(
        host,
        port,
        size,
        is_master=True,
        timeout=datetime.timedelta(seconds=timeout_s),
        wait_for_workers=False,
        # why: the store takes the socket over (bound where we chose); detached, Python's
        # socket object never closes the descriptor under it.
        master_listen_fd=server.detach(),
    )


def client_store(host: str, port: int, size: int, timeout_s: float) -> dist.TCPStore:
    """A learner's connection to rank 0's store."""
    timeout = datetime.timedelta(seconds=timeout_s)
    return dist.TCPStore(host, port, size, is_master=False, timeout=timeout)


class ProcessGroupCollective:
    """One learner's side of the group (`gazelle.runtime.interfaces.Collective`).

    Args:
        store: rank 0's store (`serve_store`) or a connection to it (`client_store`).
        rank, size: this learner's rank and the number of learners.
        device: this learner's device (cuda: NCCL; else gloo).
        timeout_s: the longest any collective call waits for the others.
        check: raises `LearnerLost` when a learner this one waits for is gone (rank 0: a
            dead learner process; the others: rank 0 gone); called in every wait on the
            store (messages, barriers).
        interface: the network interface gloo's (or NCCL's) sockets bind (one machine:
            loopback; a cluster: the one holding this node's cluster address); None:
            `GLOO_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME`, else as gloo or NCCL decide.
    """

    def __init__(
        self,
        store: dist.Store,
        rank: int,
        size: int,
        device: torch.device,
        timeout_s: float,
        check: Callable[[], None] = lambda: None,
        interface: str | None = None,
    ) -> None:
        self._rank, self._size, self._device = rank, size, device
        self._store, self._check, self.timeout_s = store, check, timeout_s
        self._sent = self._received = self._barriers = 0
        cuda = device.type == "cuda"
        if cuda:
            torch.cuda.set_device(device)
        if interface is not None:
            # why: without it gloo binds the address the host name resolves to, and NCCL's
            # bootstrap the first non-loopback interface, which other machines may reach;
            # one machine's learners need loopback only, a cluster's its own network. A
            # user's own variable names an interface and is kept.
            os.environ.setdefault("NCCL_SOCKET_IFNAME" if cuda else "GLOO_SOCKET_IFNAME", interface)
        dist.init_process_group(
            "nccl" if cuda else "gloo",
            store=store,
            rank=rank,
            world_size=size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    @property
    def device(self) -> torch.device:
        return self._device

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)

    def broadcast(self, tensor: torch.Tensor) -> None:
        dist.broadcast(tensor, src=0)

    def barrier(self) -> None:
        """Every learner waits here until all have come, at most `start_timeout` (then
        `LearnerLost` naming the missing ones); a learner that died ends the wait at once."""
        # why: in the store, not a collective call: its wait is the start-up's bound, not the
        # steps', and it can name who is missing (gloo's barrier cannot; NCCL has none).
        key = BARRIER_KEY.format(self._barriers, "{}")
        self._barriers += 1
        self._store.set(key.format(self._rank), "1")
        keys = [key.format(rank) for rank in range(self._size)]
        wait_for_keys(self._store, keys, start_timeout(self.timeout_s), self._check)

    def post(self, message: Any) -> None:
        """Rank 0: the next message for the others (tensors, numbers, text, dtypes, in
        lists, tuples and dicts: a batch's header, the start state; None: stop); it waits
        for no one."""
        buffer = io.BytesIO()
        torch.save(message, buffer)
        # why: torch's stub says str; the store takes bytes as they are (binary values).
        self._store.set(MESSAGE_KEY.format(self._sent), buffer.getvalue())  # type: ignore[arg-type]
        self._sent += 1

    def next_message(self) -> Any:
        """Ranks > 0: rank 0's next message, waited for as long as rank 0 lives.

        why: rank 0 may wait minutes for its actors' first batch or write a checkpoint
        between two batches; no timeout fits that, so the wait is bounded by rank 0's life
        instead of by the group's timeout. A poll, backing off from 0.5 ms to 10 ms: the
        next batch usually follows the last step at once (the store's own timed wait logs
        a warning at every timeout)."""
        key = MESSAGE_KEY.format(self._received)
        delay = 0.0005
        while not self._store.check([key]):
            self._check()
            time.sleep(delay)
            delay = min(0.01, delay * 2)
        self._received += 1
        # why: anyone on this machine can reach the store (it has no token); what is read
        # from it is never unpickled, only loaded as plain data and tensors.
        return torch.load(io.BytesIO(self._store.get(key)), weights_only=True)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if dist.is_initialized():
                dist.destroy_process_group()


def wait_for_keys(
    store: dist.Store, keys: list[str], timeout_s: float, check: Callable[[], None]
) -> None:
    """Wait until `store` holds `keys`, calling `check()` (raises when a learner died) every
    0.1 s; `LearnerLost` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    # why: a poll, not the store's blocking wait: between two looks it sees a learner die
    while not store.check(keys):
        check()
        if time.monotonic() > deadline:
            missing = [key.rsplit("/", 1)[-1] for key in keys if not store.check([key])]
            raise LearnerLost(
                f"learner {', '.join(missing)} did not start within {timeout_s:.0f} s "
                "(at least --learner-timeout-s); the run stops"
            )
        time.sleep(0.1)


def collective_failure(err: BaseException) -> bool:
    """Whether `err` is a failed collective call (a closed connection, a timeout)."""
    if isinstance(err, dist.DistError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(
        word in text for word in ("gloo", "nccl", "timed out", "timeout", "connection")
    )


def process_state(pid: int | None) -> str:
    """A process's state letter from /proc (T: stopped); "" where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""
