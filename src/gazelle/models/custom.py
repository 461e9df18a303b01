"""Torsos of the user's own: registered by name (`gazelle.register_torso`, kept in
`gazelle.registrations`) or named by a `module:attr` path (`--model mypkg.nets:WideTorso`).

A factory is called as `factory(frame_shape)` and returns an `nn.Module` with an int
`output_size`, mapping frames `[N, *frame_shape]` (uint8 `[N, C, H, W]` images, or float32
`[N, D]` vectors) to features `[N, output_size]`. A class whose `__init__` takes the frame
shape is a factory; subclassing `gazelle.models.torsos.Torso` gives its `_image` helper
(uint8 to [0, 1] floats) and its image/vector check (`is_image`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gazelle.models.torsos import TORSOS, Torso, check_frames
from gazelle.registrations import describe, torso_names, torso_ref


class CustomTorso(Torso):
    """A user's module as a `Torso`: `forward` is the module's, `output_size` its own."""

    reads_through_image = False  # why: the user's module makes its own floats

    def __init__(self, net: nn.Module, frame_shape: tuple[int, ...], output_size: int) -> None:
        super().__init__(frame_shape)
        self.net = net
        self.output_size = output_size

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.net(frames)


def _load(path: str) -> Callable[..., Any]:
    module, _, attr = path.partition(":")
    try:
        target: Any = importlib.import_module(module)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"torso {path!r}: cannot import it ({err})") from err
    if not callable(target):
        raise ValueError(f"torso {path!r}: {target!r} is not callable")
    return target


def build(name: str, frame_shape: tuple[int, ...]) -> Torso:
    """Build registered torso (or `module:attr` path) `name` for frames of `frame_shape`.

    Raises:
        ValueError: an unknown name, an import that fails, a factory that raises, or a
            result that is not an `nn.Module` with a positive int `output_size`.
    """
    ref = torso_ref(name)
    if ref is None:
        allowed = " | ".join((*TORSOS, *torso_names()))
        raise ValueError(f"unknown torso {name!r}; expected one of {allowed} or 'module:attr'")
    factory = _load(ref) if isinstance(ref, str) else ref
    shape = tuple(frame_shape)
    try:
        net = factory(shape)
    except Exception as err:  # why: the user's code; turned into one line that names it
        raise ValueError(
            f"torso {name!r}: {describe(ref)}({shape}) raised {type(err).__name__}: {err}"
        ) from err
    size = getattr(net, "output_size", None)
    if not isinstance(net, nn.Module) or isinstance(size, bool) or not isinstance(size, int):
        raise ValueError(
            f"torso {name!r}: {describe(ref)} returned a {type(net).__name__} with "
            f"output_size {size!r}; allowed: an nn.Module with an int output_size"
        )
    if size <= 0:
        raise ValueError(f"torso {name!r}: output_size {size}; allowed: a positive int")
    if isinstance(net, Torso):
        check_frames(name, type(net), shape)
        return net
    return CustomTorso(net, shape, size)


def check_forward(torso: nn.Module, name: str, frame_shape: tuple[int, ...], dtype: Any) -> None:
    """Run `torso` on two zero frames; ValueError unless it gives features
    `[2, output_size]`."""
    frames = torch.zeros(2, *frame_shape, dtype=dtype)
    try:
        with torch.no_grad():
            features = torso(frames)
    except Exception as err:  # why: the user's code; turned into one line that names it
        raise ValueError(
            f"torso {name!r} failed on frames {tuple(frames.shape)} {dtype}: "
            f"{type(err).__name__}: {err}"
        ) from err
    size = int(getattr(torso, "output_size", -1))
    if not isinstance(features, torch.Tensor) or tuple(features.shape) != (2, size):
        got = tuple(features.shape) if isinstance(features, torch.Tensor) else type(features)
        raise ValueError(
            f"torso {name!r} maps frames {tuple(frames.shape)} to {got}; allowed: features "
            f"[N, output_size] = (2, {size})"
        )
