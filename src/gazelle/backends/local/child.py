"""The child's side of a `ProcessFleet`: its entry point (`child_main`), what a process gets
to talk to its fleet (`ChildLink`) and the helpers it builds from it (`ChildContext`: report
events, beat, see whether to stop; `run_work`: a `TaskFleet` process running the work it was
handed)."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from gazelle.backends.local.channels import MAX_MESSAGE, Sender, fits
from gazelle.registrations import Registrations
from gazelle.runtime.interfaces import Work


def child_main(
    registrations: Registrations, target: Callable[..., None], args: tuple[Any, ...]
) -> None:
    """Every child process starts here: the parent's registered torsos and envs first
    (`gazelle.registrations`), then `target(*args)`."""
    # why: a spawned child imports gazelle afresh; what the user registered in the parent
    # (perhaps under `if __name__ == "__main__":`, which the child does not run) must be in
    # place before the child builds its agent or its envs.
    registrations.restore()
    target(*args)


@dataclasses.dataclass
class ChildLink:
    """What a child process gets to talk to its fleet (picklable)."""

    stop: Any
    event_writer: Any
    heartbeats: torch.Tensor
    index: int


class ChildContext:
    """In the child: `report(event)`, `beat()`, `should_stop()` (and `waiting()`, which
    beats too, for any loop that waits on something else)."""

    def __init__(self, link: ChildLink) -> None:
        self.link = link
        self.report = event_sender(link.event_writer)
        self._parent = os.getppid()

    def should_stop(self) -> bool:
        # why: a trainer killed with SIGKILL never sets the stop event; an orphan is
        # re-parented, so a changed parent pid means the run is gone.
        return bool(self.link.stop.is_set()) or os.getppid() != self._parent

    def beat(self) -> None:
        self.link.heartbeats[self.link.index] = time.monotonic()

    def waiting(self) -> bool:
        """`should_stop()` for wait loops: a process waiting is not hung, so it beats."""
        self.beat()
        return self.should_stop()


def run_work(work: Work, spec: Any, link: ChildLink, *args: Any) -> None:
    """A `TaskFleet` process: `work(spec, context, *args)`, its `context` this process's
    `ChildContext` (a `gazelle.runtime.interfaces.WorkerContext`)."""
    work(spec, ChildContext(link), *args)


def event_sender(conn: Any) -> Callable[[dict[str, Any]], None]:
    """A child's `report`: sends events through its own pipe without ever blocking (see
    `gazelle.backends.local.channels`); an unroll event too big for one atomic message goes
    as several, its episodes split among them; a fault's message is cut to fit."""
    sender = Sender(conn)

    def report(event: dict[str, Any]) -> None:
        if fits(event):
            sender.send(event)
        elif len(event.get("episodes", ())) > 1:
            half = len(event["episodes"]) // 2
            report({**event, "episodes": event["episodes"][:half]})
            # why: the rest of the event (timings, counts, metrics) goes once, with part 1.
            report({"type": event["type"], "level_id": event.get("level_id", 0),
                    "episodes": event["episodes"][half:]})  # fmt: skip
        elif isinstance(event.get("message"), str) and len(event["message"]) > 200:
            report({**event, "message": "..." + event["message"][-(MAX_MESSAGE // 2) :]})
        else:
            sender.send(event)  # counted as dropped if it still does not fit

    return report
