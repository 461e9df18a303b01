"""The seams between the runtime and a backend: what actors, policies and loops consume.

A backend (`gazelle.backends.local`: processes and shared memory; others: another transport)
implements these; the actor, the policies, the learner and the algorithms' loops are typed
against them only, so a new backend is a new module with no edit to any of those.

    actor --UnrollWriter--> (transport) --BatchSource--> loop -> learner
    loop --ParamPublisher--> (transport) --ParamSource--> policy (actor)
    actor --report(event)--> (transport) --Fleet.poll()--> loop -> logger   (telemetry)
    learner rank r <--Collective--> learner rank 0      (`--learners N`: gradients, batches)

Every wait has a timeout, and every queue behind these is bounded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

if TYPE_CHECKING:
    from gazelle.runtime.schedule import LinearDecay

#: Stats an actor reports once per unroll (`Fleet.poll`, event type "unroll"): seconds per
#: env step spent in each stage.
ACTOR_STAGES = ("inference", "env", "write")


class UnrollWriter(Protocol):
    """Where an actor writes its unrolls: claim one unroll per env, write its `T+1` steps,
    then commit them all; nothing half-written ever reaches the learner."""

    def acquire(
        self, actor_id: int, count: int, timeout: float, should_stop: Callable[[], bool]
    ) -> list[int]:
        """Claim `count` unroll handles for this actor; [] once `should_stop()`; raises
        TimeoutError after `timeout` seconds without room."""
        ...

    def write_step(self, slots: torch.Tensor, t: int, values: dict[str, torch.Tensor]) -> None:
        """Step `t` of the claimed unrolls: each value `[len(slots), ...]`."""
        ...

    def write_state(self, slots: torch.Tensor, state: tuple[torch.Tensor, ...]) -> None:
        """The agent state at the unrolls' start (`()` without one)."""
        ...

    def commit(
        self,
        slots: list[int],
        actor_id: int,
        level_id: int,
        version: int,
    ) -> None:
        """Hand the fully written unrolls to the learner's side."""
        ...


class BatchSource(Protocol):
    """Where the learner's loop gets its time-major batches `[T+1, B, ...]`."""

    def batches(
        self, batch_size: int, timeout: float, should_stop: Callable[[], bool]
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Batches of `batch_size` unrolls until `should_stop()`; raises TimeoutError when
        no unroll came for `timeout` seconds."""
        ...


class ParamPublisher(Protocol):
    """The learner's side of the weights: publish a new version."""

    def publish(self, module: nn.Module, version: int) -> None: ...


class ParamSource(Protocol):
    """An actor's side of the weights: pull when newer."""

    def current_version(self) -> int: ...

    def pull(self, module: nn.Module, have_version: int) -> int:
        """Load the weights into `module` if newer than `have_version`; return the version
        loaded (or `have_version`)."""
        ...


class ParameterServer(Protocol):
    """A3C's global network and optimiser: workers pull the weights and push gradients
    (local backend: shared memory, Hogwild; Ray: a parameter-server actor)."""

    @property
    def step_count(self) -> int:
        """Updates applied so far, by all workers."""
        ...

    def pull(self, module: nn.Module) -> int:
        """Copy the global weights into `module`; returns the step count."""
        ...

    def push(self, grads: Sequence[torch.Tensor | None], worker: int) -> int:
        """Apply one optimiser step with these gradients (the parameters' order); returns
        the step count after it."""
        ...

    def push_measured(
        self, grads: Sequence[torch.Tensor | None], worker: int
    ) -> tuple[int, dict[str, float]]:
        """`push`, also returning what the step did to each layer group (the agent's
        top-level children): `{"layers/update_ratio/<group>": ||step|| / ||weights before||}`,
        measured on this step alone (see `gazelle.runtime.layer_stats`)."""
        ...

    @property
    def frame_count(self) -> int:
        """Env frames trained on so far, by all workers."""
        ...

    def add_frames(self, worker: int, frames: int) -> None: ...

    def load_weights(self, module: nn.Module) -> None:
        """Make `module`'s weights the global ones (after a checkpoint is restored)."""
        ...

    def state_dict(self) -> dict[str, object]:
        """The optimiser's state and the counters (for a checkpoint)."""
        ...

    def load_state_dict(self, state: dict[str, object]) -> None: ...

    def set_schedule(self, schedule: LinearDecay | None) -> None:
        """Follow `schedule` from now on (None: a constant rate); before the workers start."""
        ...


class WorkerContext(Protocol):
    """How a worker talks to whatever runs it (a local process's `ChildContext`, or a Ray
    actor): telemetry, sign of life, whether to stop."""

    def report(self, event: dict[str, Any]) -> None: ...

    def beat(self) -> None: ...

    def should_stop(self) -> bool: ...

    def waiting(self) -> bool:
        """`should_stop()` for wait loops (it beats too: a worker waiting is not hung)."""
        ...


#: The work an algorithm hands a backend to run in each of its worker processes, called
#: there as `work(spec, context, *args)` (`context` a `WorkerContext`). Picklable by
#: reference: a module-level function (A3C's `run_worker`), so no backend imports an
#: algorithm.
Work = Callable[..., None]


class PolicyStopped(Exception):
    """The run is stopping while an actor waited for its inference server."""


class InferenceClient(Protocol):
    """An actor's line to a central inference server (one request in flight): `submit`
    sends one, `receive` waits for its answer, `infer` does both. An actor with several env
    groups holds one client per group, so one group steps its envs while another's request
    is served."""

    @property
    def state_size(self) -> int:
        """Size of each of the agent state tensors `(h, c)`; 0 without a core."""
        ...

    def infer(
        self, inputs: dict[str, torch.Tensor], count: int
    ) -> tuple[dict[str, torch.Tensor], int]:
        """Agent outputs for `count` envs' inputs (obs fields, `last_action`, `reward`,
        `done`, and `state_h`/`state_c` with a core): `action`, `policy_logits`, `baseline`
        (and the new `state_h`/`state_c`), each `[count, ...]`, plus the weights' version.
        Raises TimeoutError without an answer in time, PolicyStopped when the run stops."""
        ...

    def submit(self, inputs: dict[str, torch.Tensor], count: int) -> None:
        """Send the request of `infer` without waiting (none may be in flight)."""
        ...

    def receive(self) -> tuple[dict[str, torch.Tensor], int]:
        """Wait for the answer to the request in flight: as `infer` returns it."""
        ...


class Fleet(Protocol):
    """The actor processes of a run (and any server they need)."""

    restarts: list[int]

    @property
    def dropped_slots(self) -> int:
        """Env slots whose half-written unrolls were dropped with a replaced actor."""
        ...

    def start(self) -> None: ...

    def poll(self) -> list[dict[str, Any]]:
        """Replace dead and hung actors; return the events since the last call: telemetry
        ("unroll": episodes that ended, stage timings, action counts) and faults
        ("actor_hung", "actor_restart", "actor_crash", "env_error")."""
        ...

    def check(self) -> None:
        """Raise if a part the run cannot go on without has died (e.g. a server)."""
        ...

    def supervise(self) -> None:
        """Replace dead and hung actors now (while the learner waits for data), keeping
        the events for the next `poll`."""
        ...

    def stats(self) -> dict[str, float]:
        """Counters for the logs (e.g. central inference batches and rows)."""
        ...

    def describe(self) -> str:
        """Each actor's state, for a message when the learner gets no data."""
        ...

    def close(self, timeout: float = 10.0) -> None: ...


class Collective(Protocol):
    """The learners of one run (`--learners N`) as seen by one of them: its rank, their
    number, and the collective calls they make together (a backend builds it on
    torch.distributed: gloo on CPU, NCCL on GPUs). Every call has a timeout, and raises when
    a member is gone or silent past it, so no learner waits forever on another."""

    @property
    def rank(self) -> int:
        """This learner's rank, 0 to `size - 1`; rank 0 publishes, logs and checkpoints."""
        ...

    @property
    def size(self) -> int:
        """The number of learners."""
        ...

    @property
    def device(self) -> torch.device:
        """This learner's device (its batches and gradients live there)."""
        ...

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        """Replace `tensor` (on this learner's device) by its sum over the learners."""
        ...

    def broadcast(self, tensor: torch.Tensor) -> None:
        """Every learner's `tensor` (same shape and dtype everywhere) becomes rank 0's."""
        ...

    def barrier(self) -> None:
        """Every learner waits until all have come here, within the learners' start-up
        bound (the backend's: a spawn and an import are far slower than a step); raises
        naming the learners that did not come."""
        ...

    def post(self, message: Any) -> None:
        """Rank 0: the next message for the others (picklable; None tells them to stop);
        it waits for no one."""
        ...

    def next_message(self) -> Any:
        """Ranks > 0: rank 0's next message, waited for as long as rank 0 lives."""
        ...

    def close(self) -> None:
        """Leave the group (never raises)."""
        ...
