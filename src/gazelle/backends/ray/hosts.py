"""What runs inside a Ray actor: the runtime's `Actor` (IMPALA) behind one method call per
unroll, with an `UnrollWriter` that fills numpy arrays and a `ParamSource` that fetches new
weights from the object store by reference.

The classes here are plain Python; `gazelle.backends.ray.fleet` wraps them with
`ray.remote` (declaring their CPUs) so this module imports without Ray.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from gazelle.backends.local.layout import SlotLayout, is_state
from gazelle.backends.ray.params import FETCH_TIMEOUT_S
from gazelle.models import state_size
from gazelle.registrations import Registrations
from gazelle.runtime.actor import Actor, ActorSpec, actor_agent
from gazelle.runtime.policy import CentralPolicy, LocalPolicy, Policy
from gazelle.runtime.weights import load_flat


class ArrayWriter:
    """An `UnrollWriter` over one actor's own arrays: `[T+1, E, ...]` per field (`[E, H]`
    for the state), overwritten by each unroll; `commit` keeps the metadata."""

    def __init__(self, layout: SlotLayout, num_envs: int) -> None:
        self.data: dict[str, torch.Tensor] = {}
        for name, (shape, dtype) in layout.field_shapes().items():
            full = (num_envs, *shape) if is_state(name) else (shape[0], num_envs, *shape[1:])
            self.data[name] = torch.zeros(full, dtype=dtype)
        self.num_envs = num_envs
        self.meta: dict[str, int] = {}

    def acquire(self, actor_id: int, count: int, timeout: float, should_stop: Any) -> list[int]:
        return list(range(count))

    def write_step(self, slots: torch.Tensor, t: int, values: dict[str, torch.Tensor]) -> None:
        for name, value in values.items():
            self.data[name][t, slots] = value

    def write_state(self, slots: torch.Tensor, state: tuple[torch.Tensor, ...]) -> None:
        if state:
            self.data["state_h"][slots] = state[0]
            self.data["state_c"][slots] = state[1]

    def commit(self, slots: list[int], actor_id: int, level_id: int, version: int) -> None:
        self.meta = {"actor_id": actor_id, "level_id": level_id, "policy_version": version}

    def arrays(self) -> dict[str, np.ndarray]:
        """The unroll as numpy (copies: the next unroll overwrites the tensors)."""
        return {name: tensor.numpy().copy() for name, tensor in self.data.items()}


class RefParams:
    """A `ParamSource` fed by the driver: each call hands the newest weights' object
    reference (boxed in a list, so that Ray does not fetch it) and version; the weights are
    fetched only when the actor's copy is older."""

    def __init__(self) -> None:
        self._ref: Any = None
        self._version = -1

    def offer(self, box: list[Any], version: int) -> None:
        self._ref, self._version = box[0], version

    def current_version(self) -> int:
        return self._version

    def pull(self, module: nn.Module, have_version: int) -> int:
        if self._version == have_version or self._ref is None:
            return have_version
        import ray

        flat = ray.get(self._ref, timeout=FETCH_TIMEOUT_S)
        load_flat(module, torch.from_numpy(np.array(flat)))
        return self._version


class ActorHost:
    """One IMPALA actor in a Ray actor process: `unroll(box, version)` runs one unroll of
    all its envs (env and LSTM state persist between calls, as in the seed's actor) and
    returns it with the telemetry events it produced."""

    def __init__(self, registrations: Registrations, spec: ActorSpec, server: Any = None) -> None:
        """`server`: the central inference server's handle (None: act with an own copy)."""
        # why: the driver's registered torsos and envs, before anything is built here.
        registrations.restore()
        # why: one torch thread per actor process (as the local backend: DESIGN.md).
        torch.set_num_threads(1)
        torch.manual_seed(spec.seed)
        self.spec = spec
        layout = SlotLayout(spec.unroll_length, spec.obs_spec, state_size(spec.use_lstm))
        self.writer = ArrayWriter(layout, spec.envs_per_actor)
        self.params = RefParams()
        policy: Policy | list[Policy]
        if server is None:
            policy = LocalPolicy(
                actor_agent(spec), self.params, spec.envs_per_actor, level=spec.value_level
            )
        else:
            from gazelle.backends.ray.inference import RayInferenceClient

            size = state_size(spec.use_lstm)
            # why: a client per env group, so each group can have a request in flight.
            policy = [
                CentralPolicy(
                    RayInferenceClient(server, size, spec.response_timeout_s),
                    hi - lo,
                    level=spec.value_level,
                )
                for lo, hi in spec.group_bounds()
            ]
        self.events: list[dict[str, Any]] = []
        self.actor = Actor(spec, self.writer, policy, self.events.append)

    def unroll(self, box: list[Any], version: int) -> dict[str, Any]:
        """One unroll: `{"data": name -> array, "meta": ..., "events": [...]}`."""
        self.params.offer(box, version)
        slots = list(range(self.spec.envs_per_actor))
        self.actor.unroll(slots)
        spec = self.spec
        self.writer.commit(slots, spec.actor_id, spec.level_id, self.actor.version)
        events, self.events[:] = list(self.events), []
        return {"data": self.writer.arrays(), "meta": dict(self.writer.meta), "events": events}

    def pid(self) -> int:
        import os

        return os.getpid()

    def ready(self) -> int:
        """Answers once the actor is placed and built (the fleet's start-up check)."""
        return self.spec.actor_id
