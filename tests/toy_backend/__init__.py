"""A toy backend, written as a new backend would be: this folder and one registry line
(`gazelle.config.registry.register_backend(THREADS)`; a built-in one would add its line to
`BUILT_IN_BACKENDS`), nothing else of gazelle touched. `tests/test_registry.py` trains
IMPALA on it through `gazelle train --backend threads`.

What it is: the actors as threads of the learner's process (no process is started), each
running the runtime's `Actor` with its own agent copy; unrolls are handed over through a
queue of slots in this process's memory, weights through a lock-held flat copy. It shares
with the other backends only the unroll's field layout (`SlotLayout`). It runs no workers
(`build_workers` unset): A3C refuses it.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from gazelle.backends import BackendRequest, Transport
from gazelle.backends.local.layout import SlotLayout, is_per_unroll, is_state
from gazelle.config import Backend
from gazelle.models import state_size
from gazelle.runtime.actor import Actor, actor_agent
from gazelle.runtime.policy import LocalPolicy
from gazelle.runtime.weights import flatten, load_flat

#: The fleets this process built (a test reads what ran where).
BUILT: list[ThreadFleet] = []
#: Seconds between two looks at a queue while waiting.
TICK_S = 0.05


class MemoryUnrolls:
    """`UnrollWriter` and `BatchSource` in one process: time-major slots `[T+1, slots, ...]`,
    a queue of free slots per actor and one of committed slots for the learner."""

    def __init__(self, layout: SlotLayout, num_actors: int, slots_per_actor: int) -> None:
        slots = num_actors * slots_per_actor
        self.data: dict[str, torch.Tensor] = {}
        for name, (shape, dtype) in layout.field_shapes().items():
            full = (slots, *shape) if is_state(name) else (shape[0], slots, *shape[1:])
            self.data[name] = torch.zeros(full, dtype=dtype)
        self.meta = {
            "actor_id": torch.zeros(slots, dtype=torch.int32),
            "level_id": torch.zeros(slots, dtype=torch.int32),
            "policy_version": torch.zeros(slots, dtype=torch.int64),
        }
        self.free: list[queue.Queue[int]] = [queue.Queue() for _ in range(num_actors)]
        for slot in range(slots):
            self.free[slot // slots_per_actor].put(slot)
        self.ready: queue.Queue[int] = queue.Queue()

    def acquire(
        self, actor_id: int, count: int, timeout: float, should_stop: Callable[[], bool]
    ) -> list[int]:
        taken: list[int] = []
        deadline = time.monotonic() + timeout
        while len(taken) < count:
            try:
                taken.append(self.free[actor_id].get(timeout=TICK_S))
            except queue.Empty:
                if should_stop():
                    for slot in taken:
                        self.free[actor_id].put(slot)
                    return []
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"actor {actor_id}: no free slot in {timeout:.0f}s"
                    ) from None
        return taken

    def write_step(self, slots: torch.Tensor, t: int, values: dict[str, torch.Tensor]) -> None:
        for name, value in values.items():
            self.data[name][t, slots] = value

    def write_state(self, slots: torch.Tensor, state: tuple[torch.Tensor, ...]) -> None:
        if state:
            self.data["state_h"][slots], self.data["state_c"][slots] = state

    def commit(self, slots: list[int], actor_id: int, level_id: int, version: int) -> None:
        for slot in slots:
            self.meta["actor_id"][slot] = actor_id
            self.meta["level_id"][slot] = level_id
            self.meta["policy_version"][slot] = version
            self.ready.put(slot)

    def batches(
        self, batch_size: int, timeout: float, should_stop: Callable[[], bool]
    ) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            taken: list[int] = []
            deadline = time.monotonic() + timeout
            while len(taken) < batch_size:
                try:
                    taken.append(self.ready.get(timeout=TICK_S))
                except queue.Empty:
                    if should_stop():
                        return
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no unroll in {timeout:.0f}s") from None
            index = torch.tensor(taken)
            batch = {
                name: tensor.index_select(0 if is_per_unroll(name) else 1, index)
                for name, tensor in {**self.data, **self.meta}.items()
            }
            for slot in taken:  # why: copied above; the actor may write it again
                self.free[int(self.meta["actor_id"][slot])].put(slot)
            yield batch


class MemoryParams:
    """`ParamPublisher` and `ParamSource` in one process: a flat copy and its version."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flat: torch.Tensor | None = None
        self._version = -1

    def publish(self, module: nn.Module, version: int) -> None:
        flat = flatten(module)
        with self._lock:
            self._flat, self._version = flat, version

    def current_version(self) -> int:
        return self._version

    def pull(self, module: nn.Module, have_version: int) -> int:
        with self._lock:
            flat, version = self._flat, self._version
        if flat is None or version == have_version:
            return have_version
        load_flat(module, flat)
        return version


class ThreadFleet:
    """The actors as threads; implements `gazelle.runtime.interfaces.Fleet`."""

    def __init__(self, request: BackendRequest, unrolls: MemoryUnrolls, params: MemoryParams):
        self.specs, self.unrolls, self.params = request.actors, unrolls, params
        self.restarts = [0] * len(self.specs)
        self.dropped_slots = 0
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._stop = threading.Event()

    def start(self) -> None:
        for spec in self.specs:
            thread = threading.Thread(target=self._run, args=(spec,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _run(self, spec: Any) -> None:
        actor = None
        try:
            policy = LocalPolicy(
                actor_agent(spec), self.params, spec.envs_per_actor, waiting=self._stop.is_set
            )
            actor = Actor(spec, self.unrolls, policy, self._events.put)
            actor.run(self._stop.is_set)
        except Exception:
            self.errors.append(traceback.format_exc())
        finally:
            if actor is not None:
                actor.close()

    def poll(self) -> list[dict[str, Any]]:
        events = []
        while True:
            try:
                events.append(self._events.get_nowait())
            except queue.Empty:
                return events

    def check(self) -> None:
        if self.errors:
            raise RuntimeError(f"an actor thread failed:\n{self.errors[0]}")

    def supervise(self) -> None:
        pass

    def stats(self) -> dict[str, float]:
        return {}

    def describe(self) -> str:
        return "\n".join(
            f"actor {spec.actor_id}: thread {'alive' if t.is_alive() else 'ended'}"
            for spec, t in zip(self.specs, self.threads)
        )

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        for thread in self.threads:
            thread.join(timeout)


def build(request: BackendRequest) -> Transport:
    """Slots and weights in this process, and the (not yet started) actor threads."""
    first = request.actors[0]
    layout = SlotLayout(first.unroll_length, first.obs_spec, state_size(first.use_lstm))
    unrolls = MemoryUnrolls(layout, len(request.actors), request.slots_per_actor)
    params = MemoryParams()
    fleet = ThreadFleet(request, unrolls, params)
    BUILT.append(fleet)
    return Transport(unrolls, params, fleet)


THREADS = Backend(name="threads", build=build)
