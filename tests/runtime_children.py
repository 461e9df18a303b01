"""Functions run in spawned child processes by the runtime tests (importable by path)."""

import os

import torch


def write_slots(buffers, writer, actor_id, value, die_midway):
    """Claim this actor's slots, fill them with `value`, commit through `writer` (its end of
    the pipe from `open_channel`); or die half-way."""
    buffers.attach(writer)
    slots = buffers.acquire(actor_id, 2, timeout=10.0, should_stop=lambda: False)
    index = torch.tensor(slots)
    buffers.data["reward"][0, index] = float(value)
    if die_midway:
        os._exit(9)  # like SIGKILL mid-write: no cleanup, slots left WRITING
    buffers.data["reward"][:, index] = float(value)
    buffers.commit(slots, actor_id, level_id=actor_id, version=value)


def read_params(store, module, result_queue):
    """Pull the published weights in a child process and send them back."""
    version = store.pull(module, -1)
    result_queue.put((version, [p.detach().tolist() for p in module.parameters()]))


def cartpole_that_dies_once(marker: str):
    """CartPole whose process dies (like SIGKILL) at its first step unless `marker` exists;
    it creates the marker first, so only the first process to step it dies."""
    import pathlib

    import gymnasium

    class DiesOnce(gymnasium.Wrapper):
        def step(self, action):
            path = pathlib.Path(marker)
            if not path.exists():
                path.touch()
                os._exit(9)
            return self.env.step(action)

    return DiesOnce(gymnasium.make("CartPole-v1"))


class DeadTorso(torch.nn.Module):
    """A vector torso whose every unit is dead (ReLU of a pre-activation ~1000 below zero):
    its features are 0 whatever the input, no gradient reaches its weights, and no
    optimiser moves them. The stalled torso that `StallWatch` exists to name, made exact."""

    def __init__(self, frame_shape):
        super().__init__()
        self.output_size = 8
        self.linear = torch.nn.Linear(frame_shape[0], 8)
        self.relu = torch.nn.ReLU()  # a module: `gazelle.runtime.unit_health` reads it

    def forward(self, frames):
        return self.relu(self.linear(frames.float()) - 1000.0)


class LoudTorso(torch.nn.Module):
    """A vector torso whose ReLU features are 10,000 times a fresh torso's: the scale Pong's
    deep torso grew to under Adam (600-3,400x in 250K frames: docs/notes/lstm.md, "The deep
    LSTM's stall"), at which a plain LSTM core after it has its gates saturated at once."""

    def __init__(self, frame_shape):
        super().__init__()
        self.output_size = 64
        self.linear = torch.nn.Linear(frame_shape[0], 64)
        self.relu = torch.nn.ReLU()  # a module: `gazelle.runtime.unit_health` reads it

    def forward(self, frames):
        return self.relu(self.linear(frames.float())) * 10_000.0


class NaNAfterThree(torch.nn.Module):
    """A vector torso whose gradient turns NaN from its 4th forward with gradients on in
    this process (a learner's or an A3C worker's update; acting runs without them). Its
    features stay finite (a sampled action needs finite logits): `sqrt(b * 0)` is 0, and its
    derivative is inf * 0."""

    def __init__(self, frame_shape):
        super().__init__()
        self.output_size = 8
        self.linear = torch.nn.Linear(frame_shape[0], 8)
        self.training_calls = 0

    def forward(self, frames):
        features = torch.tanh(self.linear(frames.float()))
        if torch.is_grad_enabled():
            self.training_calls += 1
            if self.training_calls > 3:
                return features + torch.sqrt(self.linear.bias[0] * 0.0)
        return features
