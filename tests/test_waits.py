"""Every blocking wait has a timeout (docs/reliability.md, "No silent stalls"), read from
the source: each call that can block on another thread, process or machine (`ray.get`,
`ray.wait`, a queue's `get`/`put`, a thread's or process's `join`, an event's or condition's
`wait`, a lock's or the slots' `acquire`, a pipe's `recv`) passes a timeout, or says on its
line (or the line above) why it cannot block for long: `# ready: ...` (what it reads is
there already) or `# bounded: ...` (what bounds it). A wait added without either fails
here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gazelle"

#: method -> what its receiver's last name looks like when the call can block.
BLOCKING = {
    "get": re.compile(r"^ray$|queue", re.I),
    "put": re.compile(r"queue", re.I),
    "wait": re.compile(r"^ray$|thread|process|proc$|event|cond|done|flag|stop", re.I),
    "join": re.compile(r"thread|process|proc$|worker|pump", re.I),
    "acquire": re.compile(r"lock|sem|buffers|slots", re.I),
    "recv": re.compile(r"conn|pipe|channel", re.I),
}
#: positional arguments that carry the timeout (queue.get(block, timeout), put(item,
#: block, timeout); Thread.join(timeout), Event.wait(timeout), slots' acquire(.., timeout))
POSITIONAL = {"get": 2, "put": 3, "wait": 1, "join": 1, "acquire": 3}


def blocking_calls() -> list[tuple[Path, int, str, bool]]:
    """(file, line, call, has a timeout or a reason) for every blocking call."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method, receiver = node.func.attr, ast.unparse(node.func.value)
            pattern = BLOCKING.get(method)
            if pattern is None or not pattern.search(receiver.split(".")[-1]):
                continue
            keywords = {k.arg for k in node.keywords}
            timed = bool(keywords & {"timeout", "timeout_s"})
            if receiver != "ray" and method in POSITIONAL:
                timed |= len(node.args) >= POSITIONAL[method]
            said = " ".join(lines[max(0, node.lineno - 2) : node.end_lineno])
            reason = "# ready:" in said or "# bounded:" in said
            found.append((path, node.lineno, ast.unparse(node)[:100], timed or reason))
    return found


def test_every_blocking_wait_has_a_timeout_or_says_why_it_needs_none():
    calls = blocking_calls()
    # the scan sees the waits the table names: ray.get/wait, queues, joins, the slots
    text = " ".join(call for _, _, call, _ in calls)
    for expected in ("ray.get(", "ray.wait(", "_queue.get(", ".join(", "buffers.acquire("):
        assert expected in text, expected
    unbounded = [f"{p.relative_to(SRC)}:{n}: {c}" for p, n, c, ok in calls if not ok]
    assert not unbounded, "\n".join(unbounded)
