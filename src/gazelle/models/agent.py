"""The agent: one encoder per observation field + core + policy and baseline heads.

One object serves the actors (`step`/`act`, one observation per env, `[B, ...]`) and the
learner (`unroll`, `[T, B, ...]`), with the same weights and the same outputs for the same
inputs. As in the IMPALA seed, the core input is the concatenation of the torso features of
`frame`, the last reward clipped to [-1, 1], the one-hot last action (for other action spaces its
encoding, `gazelle.distributions.ActionDistribution.encode`) and then the encoding
of every other field in the obs spec's order (the instruction's for instruction tasks);
with `last_action_reward=False` (the A3C starter agent's LSTM) the encodings alone.

The policy head gives the parameters of the action distribution (`gazelle.distributions`):
logits of each discrete component; a Gaussian's means, and its log-stds either as a learned
parameter of their own, the same in every state (`log_std="parameter"`, PPO's continuous
policy) or as outputs of the head (`log_std="state"`).
Each field's encoder follows its kind (`gazelle.models.encoders`): the encoder of `frame` is
`torso`, that of `instruction` is `instruction`, any other key's is `encoders[key]`, so an
agent of the `frame` + `instruction` contract has exactly the modules it always had.

Precision: the torso follows any active autocast (bf16 on the learner); the instruction
LSTM, the core and the heads always run in float32, so logits, baselines and the state are
float32.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gazelle.actions import GAUSSIAN
from gazelle.distributions import ActionDistribution
from gazelle.models.core import LSTMCore
from gazelle.models.encoders import make_encoder, upscale, upscale_factor
from gazelle.models.init import seed_init, universe_init
from gazelle.models.normalize import ObsNorm
from gazelle.models.value import ValueHead
from gazelle.types import (
    FRAME,
    IMAGE,
    INSTRUCTION,
    TEXT,
    VECTOR,
    AgentOutput,
    AgentState,
    ObsSpec,
)

Obs = dict[str, torch.Tensor]

#: Units of the LSTM core (the IMPALA seed's 256).
CORE_SIZE = 256
#: Where a Gaussian policy's log-stds come from (see the module docstring).
LOG_STD_KINDS = ("parameter", "state")
#: The seed init's scale of a Gaussian mean's weights: the first actions are the policy's
#: noise around the middle of the bounds, as PPO's continuous baselines start (their mean
#: layer: orthogonal with gain 0.01).
GAUSSIAN_MEAN_INIT_SCALE = 0.01


class Agent(nn.Module):
    """IMPALA-style actor-critic agent.

    Args:
        obs_spec: observations and actions of the env (`gazelle.envs.obs_spec`).
        torso: one of `gazelle.models.TORSOS` (deep, shallow, nature, universe, mlp), a
            registered torso or a `module:attr` path: the encoder of `frame` and of every
            image field.
        use_lstm: an LSTM core of `core_size`; if False the heads read the core input
            directly (feed-forward; the state is `()`).
        core_size: LSTM units.
        init: `seed`: the IMPALA seed's initialisation; `universe`: the A3C starter
            agent's (both `gazelle.models.init`); `torch`: torch's defaults.
        last_action_reward: the core also gets the clipped last reward and the one-hot last
            action (the IMPALA seed's agent); False: the torso's features (and the
            instruction) alone, as the A3C starter agent's LSTM.
        activation: of the deep, shallow, nature and universe torsos
            (`gazelle.models.torsos`): relu | elu; None: the torso's own.
        subtract_background: the image torsos take each frame with its background (most
            common byte) at 0 (`gazelle.models.torsos`, "Background at 0").
        num_levels: value outputs, one per level (`ValueHead`): a multi-task run with PopArt
            keeps a normalised value and its statistics per level, as the PopArt paper's
            DMLab-30 agent; `step` and `unroll` then need each row's `level` id.
        log_std: a Gaussian policy's log-stds: `parameter` (learned, state-independent) or
            `state` (outputs of the policy head); unused without a Gaussian component.
        initial_log_std: their initial value (`parameter`) or bias (`state`).
        normalize_obs: each vector field goes through its running normalisation
            (`gazelle.models.normalize.ObsNorm`) before its encoder; the learner moves the
            statistics (`update_obs_stats`).
        separate_value: the value head reads a network of its own, a second encoder for
            every field (with the same inputs: the clipped reward and the last action),
            instead of sharing the policy's (PPO's continuous-control agent); feed-forward
            agents only (`use_lstm=False`).
        core_input_norm: the LSTM core's input goes through a layer norm (`LSTMCore`).

    Inputs of `step` (`[B, ...]`) and `unroll` (`[T, B, ...]`, same names with a time dim):
        obs: one tensor per field of `obs_spec`: images uint8 `[B, C, H, W]`, vectors
            float32 `[B, D]`, text int64 ids `[B, L]` (`gazelle.models.tokenize`), discrete
            int64 `[B, K]`; keys not in the spec are ignored.
        last_action: the action that led to this observation, `[B, *actions.shape]` of the
            action spec's dtype (int64 `[B]` for one discrete action set).
        reward: float32 `[B]`, the raw reward that came with it (clipped inside).
        done: bool `[B]`, this observation starts an episode: the state is reset before it.
        state: `(h, c)` float32 `[B, core_size]` each, or `()`.

    `forward` is `unroll` (so wrappers such as DDP see the learner's call).
    """

    def __init__(
        self,
        obs_spec: ObsSpec,
        torso: str = "deep",
        use_lstm: bool = True,
        core_size: int = CORE_SIZE,
        init: str = "seed",
        last_action_reward: bool = True,
        num_levels: int = 1,
        activation: str | None = None,
        subtract_background: bool = False,
        log_std: str = "parameter",
        initial_log_std: float = 0.0,
        normalize_obs: bool = False,
        separate_value: bool = False,
        core_input_norm: bool = False,
    ):
        super().__init__()
        if log_std not in LOG_STD_KINDS:
            raise ValueError(f"log_std: invalid value {log_std!r}; allowed: parameter | state")
        if separate_value and use_lstm:
            raise ValueError(
                "separate_value: a value network of its own needs a feed-forward agent "
                "(use_lstm=False; with the LSTM core the value reads the policy's core)"
            )
        self.obs_spec = obs_spec
        self.actions = obs_spec.actions
        self.distribution = ActionDistribution(self.actions)
        self.last_action_reward = last_action_reward
        names = obs_spec.names
        self.torso = (
            make_encoder(obs_spec.field(FRAME), torso, obs_spec, activation, subtract_background)
            if FRAME in names
            else None
        )
        self.instruction = (
            make_encoder(obs_spec.field(INSTRUCTION), torso, obs_spec)
            if INSTRUCTION in names
            else None
        )
        self.encoders = nn.ModuleDict(
            {
                f.name: make_encoder(f, torso, obs_spec, activation, subtract_background)
                for f in obs_spec.fields
                if f.name not in (FRAME, INSTRUCTION)
            }
        )
        #: The value network's own encoder of each field (`separate_value`), or None.
        self.value_encoders = (
            nn.ModuleDict(
                {
                    f.name: make_encoder(f, torso, obs_spec, activation, subtract_background)
                    for f in obs_spec.fields
                }
            )
            if separate_value
            else None
        )
        #: The running normalisation of each vector field (`normalize_obs`), by name.
        self.obs_norms = nn.ModuleDict(
            {f.name: ObsNorm(f.shape[0]) for f in obs_spec.fields if f.kind == VECTOR}
            if normalize_obs
            else {}
        )
        #: Fields after the reward and the action in the core input, in the spec's order.
        self._others = tuple(name for name in names if name != FRAME)
        #: Whole factors by which small images are scaled up before their torso.
        self._upscale = {
            f.name: upscale_factor(torso, f.shape) for f in obs_spec.fields if f.kind == IMAGE
        }
        sizes: list[Any] = [self._encoder(name).output_size for name in names]
        core_input = sum(int(size) for size in sizes)
        core_input += 1 + self.actions.encoding_size if last_action_reward else 0
        self.core = LSTMCore(core_input, core_size, core_input_norm) if use_lstm else None
        head_input = core_size if use_lstm else core_input
        gaussian = sum(c.size for c in self.actions.components if c.kind == GAUSSIAN)
        #: The learned, state-independent log-stds of the Gaussian dimensions, or None.
        self.log_std = (
            nn.Parameter(torch.full((gaussian,), float(initial_log_std)))
            if gaussian and log_std == "parameter"
            else None
        )
        head_outputs = self.actions.num_params - (gaussian if self.log_std is not None else 0)
        self.policy = nn.Linear(head_input, head_outputs)
        self.baseline = ValueHead(head_input, num_levels)
        if init == "seed":
            seed_init(self)
        elif init == "universe":
            universe_init(self, self.policy, self.baseline)
        elif init != "torch":
            raise ValueError(f"init: invalid value {init!r}; allowed: seed | universe | torch")
        self._init_gaussian_heads(init, float(initial_log_std))

    def _head_rows(self) -> list[tuple[str, int, int]]:
        """`(what, start, end)` of each block of the policy head's outputs, in order:
        `logits`, `mean`, `log_std` (a Gaussian's, when the head gives them)."""
        rows, start = [], 0
        for c in self.actions.components:
            blocks = [("logits", c.size)] if c.kind != GAUSSIAN else [("mean", c.size)]
            if c.kind == GAUSSIAN and self.log_std is None:
                blocks.append(("log_std", c.size))
            for what, size in blocks:
                rows.append((what, start, start + size))
                start += size
        return rows

    def _init_gaussian_heads(self, init: str, initial_log_std: float) -> None:
        """Small Gaussian means at the start (seed init, `GAUSSIAN_MEAN_INIT_SCALE`); log-std
        outputs of the head start at `initial_log_std` (their bias)."""
        with torch.no_grad():
            for what, start, end in self._head_rows():
                if what == "mean" and init == "seed":
                    self.policy.weight[start:end].mul_(GAUSSIAN_MEAN_INIT_SCALE)
                elif what == "log_std":
                    self.policy.bias[start:end].fill_(initial_log_std)

    def policy_params(self, head: torch.Tensor) -> torch.Tensor:
        """The policy head's outputs `[N, H]` -> the distribution's parameters `[N, P]`
        (`gazelle.distributions`): the learned log-stds put after each Gaussian's means."""
        if self.log_std is None:
            return head
        parts, column, used = [], 0, 0
        for c in self.actions.components:
            parts.append(head[:, column : column + c.size])  # logits, or the means
            column += c.size
            if c.kind == GAUSSIAN:
                parts.append(self.log_std[used : used + c.size].expand(len(head), c.size))
                used += c.size
        return torch.cat(parts, dim=-1)

    @property
    def num_actions(self) -> int:
        """The number of actions of one discrete action set (ValueError for other spaces:
        `actions` describes them)."""
        return self.actions.num_actions

    @property
    def num_levels(self) -> int:
        """Value outputs (levels) of the value head."""
        return self.baseline.num_levels

    def initial_state(
        self, batch_size: int, device: torch.device | str | None = None
    ) -> AgentState:
        """Zero state `(h, c)`, each float32 `[batch_size, core_size]`; `()` without LSTM.

        `device` defaults to the device of the agent's parameters.
        """
        if self.core is None:
            return ()
        return self.core.initial_state(batch_size, device)

    def step(
        self,
        obs: Obs,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        state: AgentState,
        greedy: bool = False,
        level: torch.Tensor | None = None,
    ) -> tuple[AgentOutput, AgentState]:
        """One step for a batch of envs: `[B, ...]` inputs -> (`AgentOutput` `[B, ...]`, state).

        `greedy=True` takes the argmax action instead of sampling from the policy. `level`
        (int `[B]`) picks each env's value output when the value head has several levels.
        """
        self._check(obs, done, time_major=False)
        # why: a step is an unroll of length 1; add and then drop the time dim.
        outputs, state = self._forward(
            {k: v.unsqueeze(0) for k, v in obs.items()},
            last_action.unsqueeze(0),
            reward.unsqueeze(0),
            done.unsqueeze(0),
            state,
            greedy=greedy,
            level=None if level is None else level.unsqueeze(0),
        )
        return AgentOutput(*(t.squeeze(0) for t in outputs)), state

    def act(
        self,
        obs: Obs,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        state: AgentState,
        greedy: bool = False,
        level: torch.Tensor | None = None,
    ) -> tuple[AgentOutput, AgentState]:
        """`step` under `torch.inference_mode()`, for acting (no autograd bookkeeping).

        The returned tensors are inference tensors: fine to store or copy into buffers,
        but `.clone()` them outside inference mode before using them in a graph.
        """
        with torch.inference_mode():
            return self.step(obs, last_action, reward, done, state, greedy=greedy, level=level)

    def unroll(
        self,
        obs: Obs,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        state: AgentState,
        level: torch.Tensor | None = None,
    ) -> tuple[AgentOutput, AgentState]:
        """`T` steps: `[T, B, ...]` inputs -> (`AgentOutput` `[T, B, ...]`, state after T-1).

        Equals `T` calls of `step`; the torso sees all `T * B` frames as one batch. `level`
        (int, `[T, B]` or `[B]`) as in `step`.
        """
        self._check(obs, done, time_major=True)
        return self._forward(obs, last_action, reward, done, state, greedy=False, level=level)

    def forward(
        self,
        obs: Obs,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        state: AgentState,
        level: torch.Tensor | None = None,
    ) -> tuple[AgentOutput, AgentState]:
        """Same as `unroll`."""
        return self.unroll(obs, last_action, reward, done, state, level)

    def _encoder(self, name: str) -> nn.Module:
        """The encoder of field `name`."""
        if name == FRAME:
            assert self.torso is not None
            return self.torso
        if name == INSTRUCTION:
            assert self.instruction is not None
            return self.instruction
        return self.encoders[name]

    def _check(self, obs: Obs, done: torch.Tensor, time_major: bool) -> None:
        """Raises ValueError if the inputs do not fit the obs spec."""
        lead = 2 if time_major else 1
        dims = "[T, B, ...]" if time_major else "[B, ...]"
        for field in self.obs_spec.fields:
            if field.name not in obs:
                raise ValueError(f"the obs spec has a field {field.name!r} that obs lacks")
            value = obs[field.name]
            # why: text may come with fewer token ids than stored (padding is never read).
            shape = tuple(value.shape[lead:])
            fits = len(shape) == 1 if field.kind == TEXT else shape == field.shape
            if done.dim() != lead or not fits:
                what = "frames" if field.name == FRAME else field.name
                raise ValueError(
                    f"expected {dims} inputs with {what} of shape {field.shape}; got "
                    f"{field.name} {tuple(value.shape)} and done {tuple(done.shape)}"
                )

    def _forward(
        self,
        obs: Obs,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        state: AgentState,
        greedy: bool,
        level: torch.Tensor | None = None,
    ) -> tuple[AgentOutput, AgentState]:
        """The shared body of `step` and `unroll`, on `[T, B, ...]` inputs."""
        num_steps, batch_size = done.shape
        inputs: list[torch.Tensor] = []  # the clipped reward and the last action
        if self.last_action_reward:
            clipped_reward = reward.reshape(-1, 1).float().clamp(-1.0, 1.0)
            # why: the actions' own dims follow the time and batch dims.
            flat_action = last_action.reshape(-1, *self.actions.shape)
            inputs = [clipped_reward, self.distribution.encode(flat_action)]
        core_input = self._core_input(obs, inputs)  # [T*B, I]

        if self.core is not None:
            core_output, state = self.core(core_input.view(num_steps, batch_size, -1), done, state)
            core_output = core_output.flatten(0, 1)  # [T*B, H]
        else:
            core_output = core_input

        with torch.autocast(core_output.device.type, enabled=False):
            policy_logits = self.policy_params(self.policy(core_output))  # [T*B, P]
            if level is not None:
                level = level.expand(num_steps, batch_size).reshape(-1)  # [T*B]
            value_input = (
                core_output
                if self.value_encoders is None
                else self._core_input(obs, inputs, self.value_encoders)
            )
            baseline = self.baseline(value_input, level).squeeze(-1)  # [T*B]
        if greedy:
            action = self.distribution.mode(policy_logits)
        else:
            action = self.distribution.sample(policy_logits)
        outputs = AgentOutput(action, policy_logits, baseline)
        shaped = AgentOutput(*(t.view(num_steps, batch_size, *t.shape[1:]) for t in outputs))
        return shaped, state

    def update_obs_stats(self, obs: Obs) -> None:
        """Merge the vector fields of `obs` (`[..., D]` each) into their running statistics
        (`normalize_obs`; the learner, once per batch)."""
        for name, norm in self.obs_norms.items():
            assert isinstance(norm, ObsNorm)
            norm.update(obs[name])

    def _core_input(
        self, obs: Obs, inputs: list[torch.Tensor], encoders: nn.ModuleDict | None = None
    ) -> torch.Tensor:
        """The encodings of `frame`, then `inputs` (reward, action), then the other fields,
        `[T*B, I]`; by the policy's encoders, or by `encoders` (the value's own)."""
        names = self.obs_spec.names
        parts = [self._encode(FRAME, obs, encoders)] if FRAME in names else []  # [T*B, F]
        parts += inputs
        parts += [self._encode(name, obs, encoders) for name in self._others]
        return torch.cat(parts, dim=-1)

    def _encode(self, name: str, obs: Obs, encoders: nn.ModuleDict | None = None) -> torch.Tensor:
        """Field `name` of `[T, B, ...]` obs -> float features `[T*B, F]` (by the policy's
        encoder of the field, or by `encoders[name]`)."""
        value = obs[name].flatten(0, 1)
        if name in self.obs_norms:
            value = self.obs_norms[name](value)
        factor = self._upscale.get(name, 1)
        if factor > 1:
            value = upscale(value, factor)
        encoder = self._encoder(name) if encoders is None else encoders[name]
        return encoder(value).float()


def build_agent(
    obs_spec: ObsSpec,
    torso: str,
    use_lstm: bool = True,
    init: str = "seed",
    last_action_reward: bool = True,
    num_levels: int = 1,
    activation: str | None = None,
    subtract_background: bool = False,
    log_std: str = "parameter",
    initial_log_std: float = 0.0,
    normalize_obs: bool = False,
    separate_value: bool = False,
    core_input_norm: bool = False,
) -> Agent:
    """The one agent factory of gazelle: learner, actors, inference server, test mode and
    benchmarks all build their agent here, so that they agree on every size. `num_levels`
    value outputs: one per level of a multi-task run with PopArt, else 1."""
    return Agent(obs_spec, torso=torso, use_lstm=use_lstm, core_size=CORE_SIZE, init=init,
                 last_action_reward=last_action_reward, num_levels=num_levels,
                 activation=activation, subtract_background=subtract_background,
                 log_std=log_std, initial_log_std=initial_log_std,
                 normalize_obs=normalize_obs, separate_value=separate_value,
                 core_input_norm=core_input_norm)  # fmt: skip


def state_size(use_lstm: bool) -> int:
    """Size of each of the state tensors `(h, c)` of agents from `build_agent` (0: none)."""
    return CORE_SIZE if use_lstm else 0
