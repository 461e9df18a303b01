"""Central inference with dynamic batching (the IMPALA seed's single-machine mode).

Actors write their E envs' inputs into their own request slot in shared memory, bump the
slot's sequence number and signal the server; the server collects requests from all actors
until `max_batch` envs or `max_wait_s` after the first one, runs one `agent.step` on the
concatenated batch (on the learner's device) and scatters actions, logits, baselines and the
new LSTM state back into each actor's response slot, then signals that actor. Only
signals cross process boundaries; the data stays in preallocated shared tensors.

Protocol of one actor `a` (one request in flight per actor):

    actor:  write request[a] rows -> count[a] -> request_seq[a] = s -> wake.release()
    server: sees request_seq[a] != served[a] -> reads seq, then rows -> runs the batch ->
            writes response[a] rows, version[a] -> response_seq[a] = s -> ready[a].release()
    actor:  ready[a].acquire(timeout) until response_seq[a] == s, then copies the rows out

The LSTM state travels with the request (see `gazelle.runtime.policy`), so the server keeps
no per-actor state: a dead actor leaves nothing behind, and its successor (which continues
the sequence numbers) just starts from a fresh state.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

import torch

from gazelle.backends.local.params import ParamStore
from gazelle.models import Agent
from gazelle.runtime.interfaces import PolicyStopped
from gazelle.types import ObsSpec

#: Seconds the server waits for a first request before re-checking the stop event.
POLL_S = 0.1


class InferenceChannels:
    """One request and one response slot per actor (per env group of each actor with
    several: `num_actors` counts slots then) in shared memory, plus the signals.

    Request fields (per actor, `[N, E, ...]`): one per observation field of the `ObsSpec`
    (`frame`, `instruction`, ...), `last_action` `[N, E, *actions.shape]` of the action
    spec's dtype (int64 `[N, E]` for one discrete action set), `reward` float32, `done`
    bool, `state_h`/`state_c` float32 `[N, E, H]` (LSTM only); `count[N]` rows in use.
    Response fields: `action` as `last_action`, `policy_logits` float32 `[N, E, P]`, `baseline`
    float32 `[N, E]`, `state_h`/`state_c`, `version[N]` (the weights' version that produced
    the response).

    Create in the main process and pass to actor processes (torch shares the storage).
    """

    def __init__(
        self,
        obs_spec: ObsSpec,
        num_actors: int,
        envs_per_actor: int,
        state_size: int,
        ctx: Any,
    ) -> None:
        n, e = num_actors, envs_per_actor
        self.num_actors, self.envs_per_actor = n, e
        self.obs_names = obs_spec.names
        request = {
            f.name: torch.zeros((n, e, *f.shape), dtype=f.torch_dtype()) for f in obs_spec.fields
        }
        request.update(
            last_action=torch.from_numpy(obs_spec.actions.zeros(n * e)).view(
                n, e, *obs_spec.actions.shape
            ),
            reward=torch.zeros(n, e),
            done=torch.zeros(n, e, dtype=torch.bool),
            # why: each row's level picks its value output in a multi-task PopArt agent
            # (an actor's rows are all its level; 0 where the agent has one level).
            level=torch.zeros(n, e, dtype=torch.int64),
        )
        response = {
            "action": torch.from_numpy(obs_spec.actions.zeros(n * e)).view(
                n, e, *obs_spec.actions.shape
            ),
            "policy_logits": torch.zeros(n, e, obs_spec.actions.num_params),
            "baseline": torch.zeros(n, e),
        }
        for name in ("state_h", "state_c") if state_size else ():
            request[name] = torch.zeros(n, e, state_size)
            response[name] = torch.zeros(n, e, state_size)
        self.request = {k: v.share_memory_() for k, v in request.items()}
        self.response = {k: v.share_memory_() for k, v in response.items()}
        self.count = torch.zeros(n, dtype=torch.int64).share_memory_()
        self.request_seq = torch.zeros(n, dtype=torch.int64).share_memory_()
        self.response_seq = torch.zeros(n, dtype=torch.int64).share_memory_()
        self.version = torch.zeros(n, dtype=torch.int64).share_memory_()
        # why: counting semaphores, not events: a signal can never be lost between a check
        # and a wait, and a stale one (from a dead actor's request) only causes one extra
        # look at the sequence numbers.
        self.wake = ctx.Semaphore(0)
        self.ready = [ctx.Semaphore(0) for _ in range(n)]

    @property
    def has_state(self) -> bool:
        return "state_h" in self.request


def group_slot(actor_id: int, group: int, groups: int) -> int:
    """The request slot of env group `group` of actor `actor_id` (each of `groups` groups)."""
    return actor_id * groups + group


class SharedMemoryInferenceClient:
    """The client of request slot `actor_id` of `channels` (an actor's, or one env group's:
    `group_slot`): one request in flight through it (implements
    `gazelle.runtime.interfaces.InferenceClient`)."""

    def __init__(
        self,
        channels: InferenceChannels,
        actor_id: int,
        should_stop: Any = lambda: False,
        timeout_s: float = 120.0,
    ) -> None:
        self.channels, self.actor_id = channels, actor_id
        self.should_stop, self.timeout_s = should_stop, timeout_s
        # why: continue the slot's sequence numbers, so a response to a request of a dead
        # predecessor in this slot is never mistaken for one of ours.
        self.seq = int(channels.request_seq[actor_id])
        self._count = 0

    @property
    def state_size(self) -> int:
        channels = self.channels
        return int(channels.request["state_h"].shape[-1]) if channels.has_state else 0

    def infer(
        self, inputs: dict[str, torch.Tensor], count: int
    ) -> tuple[dict[str, torch.Tensor], int]:
        self.submit(inputs, count)
        return self.receive()

    def submit(self, inputs: dict[str, torch.Tensor], count: int) -> None:
        channels, actor = self.channels, self.actor_id
        for name, value in inputs.items():
            channels.request[name][actor, :count] = value
        channels.count[actor] = count
        self._count = count
        self.seq += 1
        # why: the sequence number is written after the rows and before the signal, so the
        # server never serves rows older than the number it answers with.
        channels.request_seq[actor] = self.seq
        channels.wake.release()

    def receive(self) -> tuple[dict[str, torch.Tensor], int]:
        channels, actor, count = self.channels, self.actor_id, self._count
        deadline = time.monotonic() + self.timeout_s
        while int(channels.response_seq[actor]) != self.seq:
            if self.should_stop():
                raise PolicyStopped
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"actor {actor}: no answer from the inference server in {self.timeout_s:.0f}s"
                )
            # why: short waits, so a stop is seen quickly; a stale signal (for a request of
            # a dead predecessor) just loops once more.
            channels.ready[actor].acquire(timeout=0.1)
        names = ["action", "policy_logits", "baseline"]
        names += ["state_h", "state_c"] if channels.has_state else []
        response = {name: channels.response[name][actor, :count].clone() for name in names}
        return response, int(channels.version[actor])


class InferenceServer:
    """Dynamic batching server: a thread in the learner process, on the learner's device.

    Args:
        channels: the shared request/response slots.
        agent: a copy of the learner's agent, moved to `device` here (the server loads
            weights into it from `params` between batches; never the learner's own module).
        params: the learner's published weights.
        stop: an event (`is_set()`) that ends the serving loop.
        max_batch: most envs per batch; None: all actors' envs.
        max_wait_s: how long to keep collecting after the first request of a batch.
    """

    def __init__(
        self,
        channels: InferenceChannels,
        agent: Agent,
        params: ParamStore,
        device: torch.device,
        stop: Any,
        max_batch: int | None = None,
        max_wait_s: float = 0.002,
    ) -> None:
        self.channels, self.params, self.device = channels, params, device
        self.agent = agent.to(device).eval()
        self.stop = stop
        self.max_batch = max_batch or channels.num_actors * channels.envs_per_actor
        self.max_wait_s = max_wait_s
        self.params_version = -1
        self.served = torch.zeros(channels.num_actors, dtype=torch.int64)
        self.error: str | None = None
        self.batches = self.rows = self.max_rows = 0
        self._offset = 0  # why: rotate who goes first when a batch is full, so none starves
        # why: a thread in the learner process rather than a process of its own. On a GPU it
        # shares the learner's CUDA context (one context, no CUDA in a spawned child), its
        # kernels run on their own stream, and the learner's Python overlaps with it because
        # torch drops the GIL inside ops; on CPU it costs no extra process, and it dies only
        # with the learner. Actors stay processes, so the env work keeps its own cores.
        self._thread = threading.Thread(target=self._run, name="inference-server", daemon=True)
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    # ---- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self, timeout: float = 10.0) -> None:
        """Join the thread (call after setting the stop event)."""
        if self._thread.is_alive():
            self._thread.join(timeout)

    def stats(self) -> dict[str, float]:
        """Batches run, envs served, mean and largest envs per batch, since the start."""
        mean = self.rows / self.batches if self.batches else 0.0
        return {"batches": self.batches, "rows": self.rows, "mean": mean, "max": self.max_rows}

    def _run(self) -> None:
        try:
            context = torch.cuda.stream(self._stream) if self._stream is not None else None
            with torch.inference_mode():
                if context is None:
                    self._serve()
                else:
                    with context:
                        self._serve()
        except BaseException:
            self.error = traceback.format_exc()

    # ---- serving ----------------------------------------------------------------------
    def _pending(self) -> list[int]:
        """Actors with a request not yet served, in rotating order."""
        waiting = (self.channels.request_seq != self.served).nonzero().squeeze(1).tolist()
        n = self.channels.num_actors
        return sorted(waiting, key=lambda a: (a - self._offset) % n)

    def _collect(self) -> list[int]:
        """Wait for requests: until `max_batch` envs or `max_wait_s` after the first."""
        channels = self.channels
        # why: every wait has a timeout, so the loop sees the stop event within POLL_S.
        if not channels.wake.acquire(timeout=POLL_S):
            return []
        deadline = time.monotonic() + self.max_wait_s
        while True:
            chosen: list[int] = []
            rows = 0
            for actor in self._pending():
                count = int(channels.count[actor])
                if rows + count > self.max_batch and chosen:
                    return chosen  # full: the rest goes into the next batch
                chosen.append(actor)
                rows += count
            remaining = deadline - time.monotonic()
            if rows >= self.max_batch or remaining <= 0:
                return chosen
            # why: wake-ups are counted per request; one may arrive for a request already
            # taken by the scan above, which only costs one more (empty) scan.
            channels.wake.acquire(timeout=remaining)

    def _serve(self) -> None:
        while not self.stop.is_set():
            actors = self._collect()
            if actors:
                self._offset = (actors[-1] + 1) % self.channels.num_actors
                self._step(actors)

    def _step(self, actors: list[int]) -> None:
        """One `agent.step` over the requests of `actors`; scatter the results back."""
        channels = self.channels
        # why: read the sequence numbers before the rows: an actor writes its rows before
        # its sequence number, so the rows read are at least as new as the number.
        seqs = [int(channels.request_seq[a]) for a in actors]
        counts = [int(channels.count[a]) for a in actors]
        inputs = {
            name: torch.cat([value[a, :c] for a, c in zip(actors, counts)]).to(self.device)
            for name, value in channels.request.items()
        }
        # why: new weights only between batches, so one batch is one policy version.
        self.params_version = self.params.pull(self.agent, self.params_version)
        obs = {k: inputs[k] for k in channels.obs_names}
        state = (inputs["state_h"], inputs["state_c"]) if channels.has_state else ()
        out, new_state = self.agent.step(
            obs, inputs["last_action"], inputs["reward"], inputs["done"], state,
            level=inputs["level"],
        )  # fmt: skip
        results = {"action": out.action, "policy_logits": out.policy_logits}
        results["baseline"] = out.baseline
        if new_state:
            results["state_h"], results["state_c"] = new_state
        results = {
            k: v.float().cpu() if v.is_floating_point() else v.cpu() for k, v in results.items()
        }
        offset = 0
        for actor, seq, count in zip(actors, seqs, counts):
            for name, value in results.items():
                channels.response[name][actor, :count] = value[offset : offset + count]
            offset += count
            channels.version[actor] = self.params_version
            # why: the sequence number goes last; the release is a full barrier, so the
            # actor sees every row written above once it sees its number.
            channels.response_seq[actor] = seq
            self.served[actor] = seq
            channels.ready[actor].release()
        self.batches += 1
        self.rows += offset
        self.max_rows = max(self.max_rows, offset)
