"""Entry checks shared by the loss modules: each failure is a `ValueError` that names the
argument and shows the shapes involved, so a caller sees at once which input is wrong."""

from __future__ import annotations

import torch


def shape_str(shape: torch.Size | tuple[int, ...]) -> str:
    """`[T, B]`-style text for a shape (`[]` for a scalar)."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def require_float(fn: str, **tensors: torch.Tensor) -> None:
    """Every tensor is a floating-point `torch.Tensor`."""
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{fn}: `{name}` must be a torch.Tensor, got {type(tensor).__name__}")
        if not tensor.is_floating_point():
            raise ValueError(f"{fn}: `{name}` must be floating point, got dtype {tensor.dtype}")


def require_int(fn: str, **tensors: torch.Tensor) -> None:
    """Every tensor is an integer (not bool) `torch.Tensor`, e.g. action indices."""
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{fn}: `{name}` must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
            raise ValueError(f"{fn}: `{name}` must hold integers, got dtype {tensor.dtype}")


def require_same_shape(fn: str, **tensors: torch.Tensor) -> torch.Size:
    """All tensors share the first one's shape; returns that shape."""
    items = list(tensors.items())
    first_name, first = items[0]
    for name, tensor in items[1:]:
        if tensor.shape != first.shape:
            raise ValueError(
                f"{fn}: `{name}` has shape {shape_str(tensor.shape)} but `{first_name}` has "
                f"shape {shape_str(first.shape)}; they must match"
            )
    return first.shape


def require_shape(fn: str, name: str, tensor: torch.Tensor, expected: torch.Size, why: str) -> None:
    """`tensor.shape == expected`, else an error that says what the shape should follow from."""
    if tensor.shape != expected:
        raise ValueError(
            f"{fn}: `{name}` has shape {shape_str(tensor.shape)}, expected "
            f"{shape_str(expected)} ({why})"
        )


def require_min_dim(fn: str, name: str, tensor: torch.Tensor, min_dim: int, layout: str) -> None:
    """`tensor` has at least `min_dim` dimensions (`layout` says which, e.g. `[T, B, A]`)."""
    if tensor.dim() < min_dim:
        raise ValueError(
            f"{fn}: `{name}` must be {layout} (at least {min_dim} dims), got shape "
            f"{shape_str(tensor.shape)}"
        )


def require_same_device(fn: str, **tensors: torch.Tensor) -> torch.device:
    """All tensors live on the first one's device; returns that device."""
    items = list(tensors.items())
    first_name, first = items[0]
    for name, tensor in items[1:]:
        if tensor.device != first.device:
            raise ValueError(
                f"{fn}: `{name}` is on {tensor.device} but `{first_name}` is on {first.device}; "
                "all inputs must be on one device"
            )
    return first.device


def compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype to compute in: the inputs' promoted dtype, at least float32 (half and
    bfloat16 inputs, e.g. from autocast, are upcast; float64 stays float64)."""
    dtype = torch.float32
    for tensor in tensors:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype
