"""The local fleet of IMPALA actors: processes on this machine (`ProcessFleet`) that write
unrolls into the shared slots and act through their own agent copy or the central inference
server, which this module also starts and watches.

With central inference the `InferenceServer` is a thread of this process: a dead server
fails the run with its traceback rather than being restarted, since it shares the learner's
process and its death means a bug (or an out-of-memory device), not a flaky env.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from gazelle.backends.local.buffers import UnrollBuffers
from gazelle.backends.local.child import ChildContext, ChildLink
from gazelle.backends.local.inference import (
    InferenceChannels,
    InferenceServer,
    SharedMemoryInferenceClient,
    group_slot,
)
from gazelle.backends.local.params import ParamStore
from gazelle.backends.local.process import ProcessFleet
from gazelle.runtime.actor import Actor, ActorSpec, actor_agent
from gazelle.runtime.allocator import keep_freed_memory
from gazelle.runtime.policy import CentralPolicy, LocalPolicy, Policy, PolicyStopped


def make_policy(
    spec: ActorSpec,
    params: ParamStore,
    channels: InferenceChannels | None,
    should_stop: Callable[[], bool],
) -> Policy | list[Policy]:
    """A `CentralPolicy` on `channels` when given (central inference), else a `LocalPolicy`.

    With central inference an actor gets one per env group, each on its own request slot
    (`group_slot`), so that each group can have a request in flight."""
    if channels is not None:
        return [
            CentralPolicy(
                SharedMemoryInferenceClient(
                    channels,
                    group_slot(spec.actor_id, group, spec.env_groups),
                    should_stop,
                    spec.response_timeout_s,
                ),
                hi - lo,
                level=spec.value_level,
            )
            for group, (lo, hi) in enumerate(spec.group_bounds())
        ]
    return LocalPolicy(
        actor_agent(spec),
        params,
        spec.envs_per_actor,
        lockstep_batch=spec.lockstep_batch,
        waiting=should_stop,
        level=spec.value_level,
    )


def actor_process(
    spec: ActorSpec,
    link: ChildLink,
    buffers: UnrollBuffers,
    params: ParamStore,
    slot_writer: Any,
    channels: InferenceChannels | None = None,
) -> None:
    """Entry point of an actor process: `link` to its fleet, `slot_writer` its end of its
    own slot pipe, `channels` central inference (or None)."""
    # why: one torch thread per actor process; two threads per process on a shared core
    # ran 10-250x slower (DESIGN.md measurements).
    torch.set_num_threads(1)
    keep_freed_memory()
    torch.manual_seed(spec.seed)
    buffers.attach(slot_writer)
    child = ChildContext(link)
    actor = None
    try:
        policy = make_policy(spec, params, channels, child.waiting)
        actor = Actor(spec, buffers, policy, child.report, child.beat)
        actor.run(child.should_stop)
    except (KeyboardInterrupt, PolicyStopped):
        pass
    except Exception:
        child.report(
            {"type": "actor_crash", "actor": spec.actor_id, "message": traceback.format_exc()}
        )
        raise
    finally:
        if actor is not None:
            actor.close()


class LocalFleet(ProcessFleet):
    """IMPALA's actors on this machine (and the central inference server, when there is
    one); implements `gazelle.runtime.interfaces.Fleet`."""

    def __init__(
        self,
        specs: list[ActorSpec],
        buffers: UnrollBuffers,
        params: ParamStore,
        ctx: Any | None = None,
        max_restarts: int = 100,
        channels: InferenceChannels | None = None,
        server: InferenceServer | None = None,
        stop_event: Any | None = None,
        actor_timeout_s: float = 120.0,
    ) -> None:
        # why: one stop event for actors and server (the server is built with it).
        super().__init__(specs, ctx, stop_event, actor_timeout_s, max_restarts)
        self.buffers, self.params = buffers, params
        self.channels, self.server = channels, server

    def _target(self) -> Callable[..., None]:
        return actor_process

    def _args(self, index: int, spec: Any, link: ChildLink) -> tuple[Any, ...]:
        slot_writer = self.buffers.open_channel(spec.actor_id)
        self._to_close.append(slot_writer)
        return (spec, link, self.buffers, self.params, slot_writer, self.channels)

    def _on_death(self, index: int) -> dict[str, Any]:
        # why: free the dead actor's half-written slots before its successor starts writing
        # to the same slots; nothing it wrote half is ever handed to the learner.
        dropped = self.buffers.release_actor(self.specs[index].actor_id)
        self.dropped_slots += dropped
        return {"dropped_slots": dropped}

    def start(self) -> None:
        if self.server is not None:
            self.server.start()
        super().start()

    def check(self) -> None:
        """Raise RuntimeError (with its traceback) if the inference server died."""
        server = self.server
        if server is None or self.stop_event.is_set() or server.alive():
            return
        raise RuntimeError(
            "the central inference server died; the run cannot go on (use --inference local "
            f"to avoid it):\n{server.error or 'no traceback (it stopped without an error)'}"
        )

    def stats(self) -> dict[str, float]:
        """The server's batching statistics (empty with local inference)."""
        return self.server.stats() if self.server is not None else {}

    def _after_stop(self, deadline: float) -> None:
        if self.server is not None:
            # why: after the actors: none is left waiting on it, and it sees the stop event.
            self.server.close(timeout=max(1.0, deadline - time.monotonic()))
