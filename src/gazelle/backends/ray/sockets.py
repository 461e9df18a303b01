"""The sockets a process tree listens on, as the kernel sees them (`/proc`), not as Ray
reports them.

A private Ray instance's processes (the driver, the GCS, the raylet, its agents and its
workers) are this process and its descendants. `listening(tree(os.getpid()))` lists every
TCP socket among them in the LISTEN state and every UDP socket bound without a peer (both
accept packets from anyone who can reach their address), read from `/proc/<pid>/fd` and
`/proc/net/{tcp,tcp6,udp,udp6}`. Linux only: elsewhere `available()` is False.
"""

from __future__ import annotations

import ipaddress
import os
import struct
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
#: /proc/net/tcp's state column: 0A is LISTEN; a UDP socket with no peer is 07 (CLOSE).
TCP_LISTEN, UDP_UNCONNECTED = "0A", "07"


@dataclass(frozen=True)
class Listener:
    """One socket that takes connections (TCP) or datagrams (UDP) from its address."""

    pid: int
    name: str  # the process's name (`/proc/<pid>/comm`: raylet, gcs_server, ray::ActorHost)
    protocol: str  # tcp | udp
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name} (pid {self.pid}) {self.protocol} {host}:{self.port}"


def is_loopback(host: str) -> bool:
    """`127.x`, `::1`, `localhost`, and IPv4-mapped `::ffff:127.x` (as `ss` shows them)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


def available() -> bool:
    """Whether this system shows sockets in `/proc` (Linux)."""
    return (PROC / "net" / "tcp").exists()


def tree(root: int) -> set[int]:
    """`root` and every process below it (children of children, from each `/proc/*/stat`)."""
    parents: dict[int, int] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # ended meanwhile
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, grew = {root}, True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in found}
        grew = not below <= found
        found |= below
    return found


def listening(pids: set[int]) -> list[Listener]:
    """Every listening TCP socket and every peerless bound UDP socket of `pids`."""
    bound = _bound_sockets()
    found: list[Listener] = []
    for pid in sorted(pids):
        try:
            fds = list((PROC / str(pid) / "fd").iterdir())
            name = (PROC / str(pid) / "comm").read_text().strip()
        except OSError:
            continue  # ended meanwhile, or not ours to read
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                entry = bound.get(int(target[8:-1]))
                if entry is not None:
                    found.append(Listener(pid, name, *entry))
    return sorted(set(found), key=lambda s: (s.pid, s.protocol, s.port))


def _bound_sockets() -> dict[int, tuple[str, str, int]]:
    """Socket inode -> (protocol, host, port) for listening TCP and peerless UDP sockets."""
    out: dict[int, tuple[str, str, int]] = {}
    for protocol, state in (("tcp", TCP_LISTEN), ("udp", UDP_UNCONNECTED)):
        for suffix in ("", "6"):
            try:
                lines = (PROC / "net" / f"{protocol}{suffix}").read_text().splitlines()[1:]
            except OSError:
                continue  # no IPv6 here
            for line in lines:
                cols = line.split()
                if len(cols) < 10 or cols[3] != state:
                    continue
                host, port = _address(cols[1])
                if protocol == "udp" and port == 0:
                    continue
                out[int(cols[9])] = (protocol, host, port)
    return out


def _address(text: str) -> tuple[str, int]:
    """`0100007F:1F90` (or a 32-digit IPv6 address) -> ("127.0.0.1", 8080)."""
    raw, port = text.split(":")
    # why: /proc prints each 32-bit word of the address as a number read in the host's
    # byte order; packed back in that order, the words are the address's bytes again.
    words = [int(raw[i : i + 8], 16) for i in range(0, len(raw), 8)]
    packed = b"".join(struct.pack("=I", word) for word in words)
    return str(ipaddress.ip_address(packed)), int(port, 16)
