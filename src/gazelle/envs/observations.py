"""Any Gymnasium observation space, read into gazelle's form (`gazelle.envs.spaces`).

`observation_converter(space)` returns the converted Dict space and the function that
converts one native observation; `gazelle.envs.adapter.GymAdapter` applies it.

- **Images** become uint8 `[C, H, W]`: a uint8 Box of rank 2 (`[H, W]`, one channel), 3
  (`[H, W, C]` or `[C, H, W]`) or 4 (a stack of frames, `[S, H, W, C]` or `[S, C, H, W]`,
  whose `S * C` planes become the channels); a Box of any other number type (float32
  pixels in [0, 1], ...) of rank 3 or 4 is an image too when its bounds are finite: its
  range `[low, high]` is mapped linearly onto 0..255 and rounded (values outside it are
  clipped, NaN is 0), so the model scales every image the same way. A float image with an
  infinite bound cannot be quantised: it is flattened into a vector, with a warning.
- **Layout** (`[H, W, C]` or `[C, H, W]`) is read from the shape: the channel axis is the
  first or the last, at most `MAX_CHANNELS` long and shorter than both other axes, and only
  one of the two may fit. Where both or neither fit (`(8, 8, 8)`, `(3, 5, 3)`) it is a guess,
  said in a one-line warning: `[H, W, C]` (Gymnasium's convention), or `[C, H, W]` for a
  Dict's `frame` key (gazelle's own form). `image_layout="hwc"` or `"chw"` (`--image-layout`)
  reads every image of the env that way instead.
- **Other spaces**: any other Box, MultiBinary: a flattened float32 vector. A bare Discrete
  or MultiDiscrete: a one-hot float32 vector; in a Dict or Tuple: int64 indices from 0
  (embedded by the agent). Text (or any space of strings): text; a bare one is the
  `instruction` key. A Tuple's members are keys `0`, `1`, ...; a nested Dict or Tuple's keys
  are joined by `_` (`{"arm": {"pos": ...}}` -> `arm_pos`). Graph, Sequence and OneOf are
  refused, naming the space.
"""

from __future__ import annotations

import multiprocessing
import string
import sys
from collections.abc import Callable, Iterator
from functools import reduce
from typing import Any

import numpy as np
from gymnasium import spaces

from gazelle.envs.spaces import is_text
from gazelle.types import FRAME, INSTRUCTION, RESERVED_KEYS

#: Longest instruction text accepted by the `instruction` space.
MAX_INSTRUCTION_CHARS = 1024
#: `image_layout` values: read from the shape (guessed where it is ambiguous), or told.
IMAGE_LAYOUTS = ("auto", "hwc", "chw")
#: The longest axis read as the channels unasked: RGB-D (4), a stack of 4 RGB frames (12).
MAX_CHANNELS = 32

Obs = dict[str, Any]
Converter = Callable[[Any], Any]

_warned: set[str] = set()


def warn_once(message: str) -> None:
    """Print `gazelle: warning: <message>` once per process, and not in the actor processes
    (`multiprocessing` children): the run's own process says it when it probes the env,
    before any actor makes one."""
    if message in _warned or multiprocessing.parent_process() is not None:
        return
    _warned.add(message)
    print(f"gazelle: warning: {message}", file=sys.stderr)


def instruction_space() -> spaces.Text:
    """The `instruction` space: printable text, possibly empty."""
    return spaces.Text(MAX_INSTRUCTION_CHARS, min_length=0, charset=string.printable)


def read_layout(shape: tuple[int, ...], image_layout: str, guess: str) -> tuple[str, bool]:
    """The layout (`"hwc"` or `"chw"`) of a rank-3 image of `shape`, and whether it is a
    guess: `image_layout` when told; else the one layout whose channel axis (last, or first)
    is at most `MAX_CHANNELS` and shorter than both other axes; else `guess`."""
    if image_layout not in IMAGE_LAYOUTS:
        raise ValueError(f"image_layout: invalid value {image_layout!r}; allowed: auto | hwc | chw")
    if image_layout != "auto":
        return image_layout, False
    a, b, c = shape

    def channels(n: int, *others: int) -> bool:
        return n <= MAX_CHANNELS and n < min(others)

    hwc, chw = channels(c, a, b), channels(a, b, c)
    if hwc != chw:
        return ("hwc" if hwc else "chw"), False
    return guess, True


def _finite_bounds(space: spaces.Box) -> bool:
    return bool(
        np.all(np.isfinite(space.low))
        and np.all(np.isfinite(space.high))
        and np.all(space.high > space.low)
    )


def is_image(space: spaces.Space[Any]) -> bool:
    """Whether `space` is read as an image (see the module docstring)."""
    if not isinstance(space, spaces.Box):
        return False
    rank = len(space.shape)
    if space.dtype == np.uint8:
        return rank in (2, 3, 4)
    number = np.issubdtype(space.dtype, np.number) and space.dtype != np.bool_
    return bool(number and rank in (3, 4) and _finite_bounds(space))


def _to_bytes(space: spaces.Box) -> Converter:
    """Native values -> uint8 of the same shape: as they are for uint8, else the bounds
    mapped onto 0..255 (rounded, clipped, NaN as 0)."""
    if space.dtype == np.uint8:
        return lambda o: np.asarray(o, np.uint8)
    low = np.asarray(space.low, np.float32)
    scale = np.float32(255.0) / (np.asarray(space.high, np.float32) - low)

    def quantise(o: Any) -> np.ndarray:
        x = (np.asarray(o, np.float32) - low) * scale
        np.nan_to_num(x, copy=False, nan=0.0)
        np.clip(np.rint(x, out=x), 0.0, 255.0, out=x)
        return x.astype(np.uint8)

    return quantise


def image_converter(
    name: str, space: spaces.Box, image_layout: str = "auto", guess: str = "hwc"
) -> tuple[spaces.Box, Converter]:
    """The uint8 `[C, H, W]` Box of an image space (`is_image`) and the converting function;
    an ambiguous layout is read as `guess` and said once (`warn_once`), naming key `name`."""
    to_bytes = _to_bytes(space)
    shape = tuple(int(d) for d in space.shape)
    if len(shape) == 2:
        return spaces.Box(0, 255, (1, *shape), np.uint8), lambda o: to_bytes(o)[None]
    layout, guessed = read_layout(shape[-3:], image_layout, guess)
    if guessed:
        said = "[C, H, W]" if layout == "chw" else "[H, W, C]"
        warn_once(
            f"observation {name!r} {space}: its layout is ambiguous, read as {said}; "
            "--image-layout hwc or chw (make(..., image_layout=...)) to say which"
        )
    stack = shape[0] if len(shape) == 4 else 1
    h, w, c = shape[-3:] if layout == "hwc" else (*shape[-2:], shape[-3])
    box = spaces.Box(0, 255, (stack * c, h, w), np.uint8)
    if layout == "chw":
        return box, lambda o: to_bytes(o).reshape(box.shape)
    # why: the channel axis moves before the rows; a stack's frames stay outermost, so its
    # planes are frame 0's channels, then frame 1's, ...
    axes = (2, 0, 1) if len(shape) == 3 else (0, 3, 1, 2)
    return box, lambda o: np.ascontiguousarray(np.transpose(to_bytes(o), axes)).reshape(box.shape)


def frame_converter(
    space: spaces.Space[Any], image_layout: str = "auto", name: str = FRAME, guess: str = "hwc"
) -> tuple[spaces.Box, Converter]:
    """The Box of a bare observation space (the `frame` key) and the converting function;
    `name` and `guess` are those of `image_converter`.

    Raises:
        ValueError: the space is not a Box, Discrete, MultiDiscrete or MultiBinary.
    """
    if isinstance(space, spaces.Box):
        if is_image(space):
            return image_converter(name, space, image_layout, guess)
        size = int(np.prod(space.shape))
        if len(space.shape) in (3, 4) and np.issubdtype(space.dtype, np.number):
            warn_once(
                f"observation {name!r} {space}: not read as an image (an infinite bound "
                f"cannot be scaled to bytes), flattened into a vector of {size}; give the Box "
                "finite bounds (e.g. Box(0, 1, ...)) if it is an image"
            )
        box: spaces.Box = spaces.Box(-np.inf, np.inf, (size,), np.float32)
        return box, lambda o: np.asarray(o, np.float32).reshape(size)
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)
        eye = np.eye(n, dtype=np.float32)
        return spaces.Box(0.0, 1.0, (n,), np.float32), lambda o: eye[int(o) - start].copy()
    if isinstance(space, spaces.MultiBinary):
        size = int(np.prod(space.shape))
        box = spaces.Box(0.0, 1.0, (size,), np.float32)
        return box, lambda o: np.asarray(o, np.float32).reshape(size)
    if isinstance(space, spaces.MultiDiscrete):
        nvec = space.nvec.reshape(-1).astype(np.int64)
        # why: offsets place each component's one-hot block after the previous ones.
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
        total = int(nvec.sum())

        def one_hot(o: Any) -> np.ndarray:
            out = np.zeros(total, np.float32)
            out[offsets + (np.asarray(o).reshape(-1) - space.start.reshape(-1))] = 1.0
            return out

        return spaces.Box(0.0, 1.0, (total,), np.float32), one_hot
    raise ValueError(
        f"unsupported observation space {space}: gazelle takes Box, Discrete, MultiDiscrete, "
        "MultiBinary, Text, or a Dict or Tuple of them"
    )


def key_name(key: Any) -> str:
    """The obs dict key gazelle uses for a Dict space's `key`: as text, `.` as `_`, and
    `obs_<key>` for a name the unroll uses itself (`gazelle.types.RESERVED_KEYS`)."""
    name = str(key).replace(".", "_") or "obs_"
    return f"obs_{name}" if name in RESERVED_KEYS else name


def key_converter(
    key: str, space: spaces.Space[Any], image_layout: str = "auto"
) -> tuple[spaces.Space[Any], Converter]:
    """The converted space of one key of a Dict observation and the function converting a
    value to it (see the module docstring).

    Raises:
        ValueError: a space gazelle cannot take (Graph, Sequence, OneOf, ...).
    """
    if is_text(space):
        return instruction_space(), str
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)
        return spaces.MultiDiscrete([n]), lambda o: np.array([int(o) - start], np.int64)
    if isinstance(space, spaces.MultiDiscrete):
        nvec, starts = space.nvec.reshape(-1), space.start.reshape(-1)
        return spaces.MultiDiscrete(nvec), lambda o: np.asarray(o, np.int64).reshape(-1) - starts
    if isinstance(space, (spaces.Box, spaces.MultiBinary)):
        # why: a Dict's `frame` is meant in gazelle's form; any other key in Gymnasium's.
        return frame_converter(space, image_layout, key, "chw" if key == FRAME else "hwc")
    raise ValueError(
        f"unsupported observation space {space} of key {key!r}: gazelle takes Box, Discrete, "
        "MultiDiscrete, MultiBinary and Text in a Dict or Tuple"
    )


def _leaves(space: spaces.Space[Any], path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """`(path, space)` of every member of a Dict or Tuple that is neither, depth first."""
    if isinstance(space, spaces.Dict):
        members: Any = space.spaces.items()
    elif isinstance(space, spaces.Tuple):
        members = enumerate(space.spaces)
    else:
        yield path, space
        return
    for key, sub in members:
        yield from _leaves(sub, (*path, key))


def dict_converter(
    space: spaces.Dict | spaces.Tuple, image_layout: str = "auto"
) -> tuple[spaces.Dict, Callable[[Any], Obs]]:
    """A Dict (or Tuple) observation space in gazelle's form, and the converting function."""
    converters = []
    for path, sub in _leaves(space):
        name = key_name("_".join(str(k) for k in path))
        converted, fn = key_converter(name, sub, image_layout)
        converters.append((path, name, converted, fn))
    names = [name for _, name, _, _ in converters]
    if len(set(names)) != len(names):
        raise ValueError(f"observation keys {list(_keys(space))} clash once renamed: {names}")
    out = spaces.Dict({name: sub for _, name, sub, _ in converters})

    def convert(o: Any) -> Obs:
        return {name: fn(reduce(lambda v, k: v[k], path, o)) for path, name, _, fn in converters}

    return out, convert


def _keys(space: spaces.Dict | spaces.Tuple) -> list[Any]:
    return list(space.spaces) if isinstance(space, spaces.Dict) else list(range(len(space)))


def observation_converter(
    space: spaces.Space[Any], image_layout: str = "auto"
) -> tuple[spaces.Dict, Callable[[Any], Obs]]:
    """Any observation space in gazelle's form (a Dict) and the function converting one
    observation to it (see the module docstring).

    Raises:
        ValueError: a space gazelle cannot take, or a bad `image_layout`.
    """
    if image_layout not in IMAGE_LAYOUTS:
        raise ValueError(f"image_layout: invalid value {image_layout!r}; allowed: auto | hwc | chw")
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        return dict_converter(space, image_layout)
    if is_text(space):
        return spaces.Dict({INSTRUCTION: instruction_space()}), lambda o: {INSTRUCTION: str(o)}
    box, frame_fn = frame_converter(space, image_layout)
    return spaces.Dict({FRAME: box}), lambda o: {FRAME: frame_fn(o)}
