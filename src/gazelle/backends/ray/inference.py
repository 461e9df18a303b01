"""Central inference on Ray (the seed's dynamic batching across machines): one threaded Ray
actor on the learner's node runs the agent for every actor's envs.

Each actor's request is one `infer` call (its envs' inputs and LSTM state, as numpy); the
calls run on the server's threads, which queue them; one batching thread takes what is
queued (waiting up to `max_wait_s` after the first, at most `max_batch` envs), runs one
`agent.step` and hands each caller its rows. Weights come as an object reference and are
loaded between batches, so one batch is one policy version.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from typing import Any

import numpy as np
import torch

from gazelle import registrations
from gazelle.backends.ray.params import FETCH_TIMEOUT_S
from gazelle.models import Agent
from gazelle.registrations import Registrations
from gazelle.runtime.interfaces import PolicyStopped
from gazelle.runtime.weights import load_flat


class _Request:
    def __init__(self, inputs: dict[str, np.ndarray], count: int) -> None:
        self.inputs, self.count = inputs, count
        self.done = threading.Event()
        self.outputs: dict[str, np.ndarray] = {}
        self.version = -1
        self.error: str | None = None


#: The request's fields that are not observation fields.
_STEP_INPUTS = frozenset({"last_action", "reward", "done", "state_h", "state_c", "level"})


class ServerFailed(RuntimeError):
    """The server's batching thread died; every call after it raises this."""


class InferenceHost:
    """The server (plain class; wrapped with `ray.remote` by `start_server`)."""

    def __init__(
        self,
        registrations: Registrations,
        agent: Agent,
        device: str,
        max_batch: int,
        max_wait_s: float,
    ) -> None:
        registrations.restore()
        self.device = torch.device(device)
        self.agent = agent.to(self.device).eval()
        self.max_batch, self.max_wait_s = max_batch, max_wait_s
        self.version = -1
        self._weights: tuple[Any, int] | None = None
        self._queue: queue.Queue[_Request] = queue.Queue()
        self.batches = self.rows = 0
        self.error: str | None = None  # the batching thread's exception, once it died
        self._thread = threading.Thread(target=self._serve_guarded, daemon=True)
        self._thread.start()

    def set_weights(self, box: list[Any], version: int) -> None:
        if version > self.version:
            self._weights = (box[0], version)

    def infer(self, inputs: dict[str, np.ndarray], count: int) -> tuple[dict[str, Any], int]:
        if self.error is not None:
            raise ServerFailed(self.error)
        request = _Request(inputs, count)
        self._queue.put(request)  # bounded: the queue has no size limit, never full
        # why: bounded; the caller's own timeout is the real one (RayInferenceClient).
        while not request.done.wait(1.0):
            if self.error is not None:
                raise ServerFailed(self.error)
        if request.error is not None:
            raise ServerFailed(request.error)
        return request.outputs, request.version

    def stats(self) -> dict[str, float]:
        """Batches served; raises once the batching thread died (the fleet's heartbeat)."""
        if self.error is not None:
            raise ServerFailed(self.error)
        mean = self.rows / self.batches if self.batches else 0.0
        return {"batches": self.batches, "rows": self.rows, "mean": mean}

    def _load(self) -> None:
        if self._weights is None or self._weights[1] <= self.version:
            return
        import ray

        ref, version = self._weights
        flat = ray.get(ref, timeout=FETCH_TIMEOUT_S)
        load_flat(self.agent, torch.from_numpy(np.asarray(flat)))
        self.version = version

    def _serve_guarded(self) -> None:
        try:
            self._serve()
        except BaseException as error:
            # why: callers wait on their requests; each must learn the server is gone.
            self.error = f"the inference server's batching thread failed: {error!r}"
            while True:
                try:
                    request = self._queue.get_nowait()
                except queue.Empty:
                    break
                request.error = self.error
                request.done.set()

    def _serve(self) -> None:
        with torch.inference_mode():
            while True:
                # why: idle until a request comes (no caller waits on it meanwhile); the
                # bounded: thread ends with its actor, killed at the end of the run
                batch = [self._queue.get()]
                rows = batch[0].count
                deadline = time.monotonic() + self.max_wait_s
                while rows < self.max_batch:
                    try:
                        request = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                    except queue.Empty:
                        break
                    batch.append(request)
                    rows += request.count
                self._step(batch)

    def _step(self, batch: list[_Request]) -> None:
        try:
            self._run(batch)
        except BaseException as error:
            for request in batch:
                request.error = f"the inference server's batching thread failed: {error!r}"
                request.done.set()
            raise

    def _run(self, batch: list[_Request]) -> None:
        self._load()
        names = batch[0].inputs.keys()
        inputs = {
            name: torch.from_numpy(np.concatenate([r.inputs[name] for r in batch])).to(self.device)
            for name in names
        }
        # why: a request holds the observation's fields and these inputs of the agent's step.
        obs = {k: v for k, v in inputs.items() if k not in _STEP_INPUTS}
        state = (inputs["state_h"], inputs["state_c"]) if "state_h" in inputs else ()
        out, new_state = self.agent.step(
            obs, inputs["last_action"], inputs["reward"], inputs["done"], state,
            level=inputs.get("level"),
        )  # fmt: skip
        results = {"action": out.action, "policy_logits": out.policy_logits.float()}
        results["baseline"] = out.baseline.float()
        if new_state:
            results["state_h"], results["state_c"] = (s.float() for s in new_state)
        arrays = {k: v.cpu().numpy() for k, v in results.items()}
        offset = 0
        for request in batch:
            end = offset + request.count
            request.outputs = {k: v[offset:end] for k, v in arrays.items()}
            request.version = self.version
            offset = end
            request.done.set()
        self.batches += 1
        self.rows += offset


class RayInferenceClient:
    """An actor's `InferenceClient` on the Ray server (one request in flight)."""

    def __init__(self, server: Any, state_size: int, timeout_s: float) -> None:
        self.server, self._state_size, self.timeout_s = server, state_size, timeout_s
        self._pending: Any = None

    @property
    def state_size(self) -> int:
        return self._state_size

    def infer(
        self, inputs: dict[str, torch.Tensor], count: int
    ) -> tuple[dict[str, torch.Tensor], int]:
        self.submit(inputs, count)
        return self.receive()

    def submit(self, inputs: dict[str, torch.Tensor], count: int) -> None:
        arrays = {k: v.numpy() for k, v in inputs.items()}
        self._pending = self.server.infer.remote(arrays, count)

    def receive(self) -> tuple[dict[str, torch.Tensor], int]:
        import ray

        pending, self._pending = self._pending, None
        try:
            outputs, version = ray.get(pending, timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError as error:
            message = f"no answer from the inference server in {self.timeout_s}s"
            raise TimeoutError(message) from error
        except ray.exceptions.RayActorError as error:
            raise PolicyStopped("the inference server is gone") from error
        except ray.exceptions.RayTaskError as error:
            if isinstance(error.cause, ServerFailed):
                # why: the run cannot act without it; the fleet's heartbeat stops the run.
                raise PolicyStopped(str(error.cause)) from error
            raise
        return {k: torch.from_numpy(np.array(v)) for k, v in outputs.items()}, version


def start_server(request: Any) -> Any:
    """The inference server as a Ray actor on this (the learner's) node, on the learner's
    device; it serves up to every actor's envs in one batch by default."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    first = request.actors[0]
    envs = len(request.actors) * first.envs_per_actor
    here = ray.get_runtime_context().get_node_id()
    cuda = request.device.type == "cuda"
    host = ray.remote(InferenceHost).options(
        # why: one thread per request in flight (one per env group of each actor) plus the
        # weights' setter; the batching runs on a thread of its own.
        max_concurrency=len(request.actors) * first.env_groups + 4,
        num_cpus=0,
        num_gpus=0.5 if cuda else 0,
        # why: next to the learner, whose weights it needs every update.
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
    )
    return host.remote(
        registrations.capture(),
        copy.deepcopy(request.agent).cpu(),
        "cuda" if cuda else "cpu",
        request.inference_max_batch or envs,
        request.inference_max_wait_s,
    )
