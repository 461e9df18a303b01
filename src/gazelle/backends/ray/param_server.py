"""A parameter server on Ray (A3C's, the seed's distributed mode): a Ray actor holding the
parameter store an algorithm hands the backend (its global network and optimiser, built
there by `WorkerRequest.make_server`), and the `ParameterServer` client that workers and the
driver call it through, each call bounded by a timeout. It knows no algorithm and no other
backend: whatever store it is handed, its calls run one at a time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from gazelle.errors import RunError
from gazelle.runtime.interfaces import ParameterServer
from gazelle.runtime.schedule import LinearDecay
from gazelle.runtime.weights import flatten, load_flat


def first_line(error: BaseException) -> str:
    """`Type: first line of the message` of a Ray error, for one-line reports."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]


class ParameterServerHost:
    """The global network and the store over it (`make_server(agent)`: A3C's shared Adam,
    the same arithmetic as on one machine); calls run one at a time, so pushes never
    interleave."""

    def __init__(
        self, agent: nn.Module, make_server: Callable[[nn.Module], ParameterServer]
    ) -> None:
        torch.set_num_threads(1)
        self.agent = agent
        self.adam = make_server(agent)

    def pull(self) -> tuple[np.ndarray, int]:
        return flatten(self.agent).numpy(), self.adam.step_count

    def push(self, grads: list[np.ndarray | None], worker: int) -> int:
        return self.adam.push([None if g is None else torch.from_numpy(g) for g in grads], worker)

    def push_measured(
        self, grads: list[np.ndarray | None], worker: int
    ) -> tuple[int, dict[str, float]]:
        tensors = [None if g is None else torch.from_numpy(g) for g in grads]
        return self.adam.push_measured(tensors, worker)

    def add_frames(self, worker: int, frames: int) -> None:
        self.adam.add_frames(worker, frames)

    def counts(self) -> tuple[int, int]:
        return self.adam.step_count, self.adam.frame_count

    def set_weights(self, flat: np.ndarray) -> None:
        load_flat(self.agent, torch.from_numpy(np.array(flat)))

    def state_dict(self) -> dict[str, object]:
        return self.adam.state_dict()

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.adam.load_state_dict(state)

    def set_schedule(self, schedule: LinearDecay | None) -> None:
        self.adam.set_schedule(schedule)


class RayParameterServer:
    """A `ParameterServer` that forwards to the server actor (picklable: workers get it).
    Every call waits at most `timeout_s`: a server that does not answer (stopped, its node
    gone) or died ends the caller's work with `RunError` (one line), never a silent wait.
    Once a call went unanswered, the calls after it raise the same error at once."""

    def __init__(self, handle: Any, timeout_s: float = 120.0) -> None:
        self.handle, self.timeout_s = handle, timeout_s
        #: The last counts seen; what `step_count` and `frame_count` say once the server
        #: is shut down (`closed`) at the end of a run.
        self.last_counts = (0, 0)
        self.closed = False
        #: The error of the call that went unanswered, in this process (None: none did).
        self.silent: RunError | None = None

    def __getstate__(self) -> dict[str, Any]:
        # why: each process finds the silence for itself (a worker gets this client when
        # it starts, whatever the driver saw before).
        return {**self.__dict__, "silent": None}

    def _get(self, ref: Any) -> Any:
        import ray

        if self.silent is not None:
            # why: the caller's work ends with this error already (the run stops); each of
            # the run's last reads (its counts, the final checkpoint, the shutdown) waited
            # out the timeout again: 3 x --actor-timeout-s (120 s by default) more.
            raise RunError(str(self.silent))
        try:
            return ray.get(ref, timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError as error:
            self.silent = RunError(
                f"the A3C parameter server gave no answer in {self.timeout_s:.0f} s "
                "(--actor-timeout-s): stopped, wedged or its node is gone"
            )
            raise self.silent from error
        except ray.exceptions.RayActorError as error:
            raise RunError(f"the A3C parameter server died: {first_line(error)}") from error

    def _counts(self) -> tuple[int, int]:
        if not self.closed:
            steps, frames = self._get(self.handle.counts.remote())
            self.last_counts = (int(steps), int(frames))
        return self.last_counts

    @property
    def step_count(self) -> int:
        return self._counts()[0]

    @property
    def frame_count(self) -> int:
        return self._counts()[1]

    def pull(self, module: nn.Module) -> int:
        flat, step = self._get(self.handle.pull.remote())
        load_flat(module, torch.from_numpy(np.array(flat)))
        return int(step)

    def push(self, grads: Sequence[torch.Tensor | None], worker: int) -> int:
        arrays = [None if g is None else g.detach().cpu().numpy() for g in grads]
        return int(self._get(self.handle.push.remote(arrays, worker)))

    def push_measured(
        self, grads: Sequence[torch.Tensor | None], worker: int
    ) -> tuple[int, dict[str, float]]:
        """`push`, and the update ratio of the step it applied per layer group."""
        arrays = [None if g is None else g.detach().cpu().numpy() for g in grads]
        step, stats = self._get(self.handle.push_measured.remote(arrays, worker))
        return int(step), dict(stats)

    def add_frames(self, worker: int, frames: int) -> None:
        self._get(self.handle.add_frames.remote(worker, frames))

    def load_weights(self, module: nn.Module) -> None:
        self._get(self.handle.set_weights.remote(flatten(module).numpy()))

    def state_dict(self) -> dict[str, object]:
        state: dict[str, object] = self._get(self.handle.state_dict.remote())
        return state

    def load_state_dict(self, state: dict[str, object]) -> None:
        self._get(self.handle.load_state_dict.remote(state))

    def set_schedule(self, schedule: LinearDecay | None) -> None:
        self._get(self.handle.set_schedule.remote(schedule))
