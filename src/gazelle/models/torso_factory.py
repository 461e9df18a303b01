"""A torso by its name: a built-in one (`gazelle.models.torsos.TORSOS`), one registered with
`gazelle.register_torso`, or a `module:attr` factory path (`gazelle.models.custom`).

Its own module so that `torsos` (the built-in networks) and `custom` (the user's, which
subclass `torsos.Torso`) import only downwards: this one imports both.
"""

from __future__ import annotations

from gazelle.models import custom
from gazelle.models.torsos import TORSOS, WITH_ACTIVATION, Torso, check_frames


def make_torso(name: str, frame_shape: tuple[int, ...], activation: str | None = None) -> Torso:
    """Builds torso `name` for frames of `frame_shape`, checking the two fit together.

    `name` is a built-in torso (`TORSOS`), one registered with `gazelle.register_torso`, or
    a `module:attr` factory path (`gazelle.models.custom`). `activation` (`ACTIVATIONS`) is
    for the torsos of `WITH_ACTIVATION`; None: the torso's own.

    Raises:
        ValueError: an unknown name, an image torso for vector frames (or the reverse), or
            an activation for a torso that takes none.
    """
    if activation is not None and name not in WITH_ACTIVATION:
        raise ValueError(
            f"activation {activation!r}: torso {name!r} has its own; only"
            f" {' | '.join(WITH_ACTIVATION)} take one"
        )
    if name not in TORSOS:
        return custom.build(name, tuple(frame_shape))
    cls = TORSOS[name]
    check_frames(name, cls, tuple(frame_shape))
    if activation is None:
        return cls(tuple(frame_shape))
    return cls(tuple(frame_shape), activation=activation)  # type: ignore[call-arg]
