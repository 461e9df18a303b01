"""What an actor process needs to build its envs and agent: `ActorSpec` (picklable)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gazelle.types import ObsSpec

if TYPE_CHECKING:
    from gazelle.envs.registry import Resolved


@dataclass(frozen=True)
class ActorSpec:
    """Everything an actor process needs to build its envs and agent (picklable)."""

    actor_id: int
    level: str
    level_id: int
    envs_per_actor: int
    unroll_length: int
    obs_spec: ObsSpec
    torso: str
    use_lstm: bool
    seed: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    slot_timeout_s: float = 600.0
    response_timeout_s: float = 120.0
    #: Batch size B when the actor acts in lockstep with the learner (one actor, local
    #: inference: exact repeats of a seeded run; see `LocalPolicy`); None: free-running.
    lockstep_batch: int | None = None
    #: The agent's core gets the last reward and action too (`gazelle.models.Agent`).
    last_action_reward: bool = True
    #: The agent's value outputs: one per level with multi-task PopArt, else 1.
    num_levels: int = 1
    #: The model's options (`ModelConfig.agent_options`: activation, background, log-stds,
    #: observation normalisation), as `gazelle.models.build_agent` takes them.
    agent_options: dict[str, Any] = field(default_factory=dict)
    #: How Gaussian actions reach a Box's bounds (`gazelle.actions`): clip | tanh.
    action_bounds: str = "clip"
    #: What `level` resolved to when the run probed its env (`EnvProbe.target`), so the
    #: actor makes its envs without resolving the spec again; None: resolve it here.
    env_target: Resolved | None = None
    #: Groups the actor's envs are split into, each with its own request in flight to the
    #: central inference server: one group steps its envs while the others wait for their
    #: actions (`Actor`). 1 with local inference.
    env_groups: int = 1

    def group_bounds(self) -> list[tuple[int, int]]:
        """`[lo, hi)` env indices of each env group: contiguous, sizes differing by at most 1."""
        e, n = self.envs_per_actor, self.env_groups
        return [(e * g // n, e * (g + 1) // n) for g in range(n)]

    @property
    def value_level(self) -> int | None:
        """The level id to send with each row (None: a one-level value head)."""
        return self.level_id if self.num_levels > 1 else None
