"""Checks that turn bad input into one line before any process starts: a torso that does not
fit the observations, a logdir that cannot be written or that holds another run, W&B asked
for without the wandb package."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from gazelle.algorithms import runlock
from gazelle.algorithms.runstate import saved_config
from gazelle.config import Config, ConfigError
from gazelle.types import FRAME, IMAGE, ObsSpec

#: Settings a run in a logdir must share with the one that wrote its checkpoint.
RESUME_KEYS = ("algo", "env", "model", "use_lstm", "activation", "subtract_background",
               "doom_actions")  # fmt: skip
#: Values of --wandb-mode.
WANDB_MODES = ("online", "offline")


def check_torso(config: Config, spec: ObsSpec) -> None:
    """The torso must take the fields it encodes (`frame` and every image: image torsos
    images, mlp vectors); a torso of the user's own (`gazelle.register_torso`) must also
    map two of them to `[2, output_size]` features."""
    from gazelle import registrations
    from gazelle.models import custom
    from gazelle.models.encoders import make_encoder, upscale_factor
    from gazelle.models.torsos import TORSOS

    torso = config.model.torso
    encoded = [f for f in spec.fields if f.name == FRAME or f.kind == IMAGE]
    shape = encoded[0].shape if encoded else spec.frame_shape
    try:
        for field in encoded:
            built = make_encoder(field, torso, spec)
            if registrations.torso_ref(torso) is not None:
                c, *side = field.shape
                k = upscale_factor(torso, field.shape) if field.kind == IMAGE else 1
                size = (c, *(d * k for d in side))
                custom.check_forward(built, torso, size, field.torch_dtype())
    except ValueError as err:
        fitting = [name for name, cls in TORSOS.items() if cls.is_image == (len(shape) == 3)]
        allowed = " | ".join([*fitting, *registrations.torso_names()])
        raise ConfigError("model", torso, f"a torso for {shape} frames: {allowed} ({err})") from err
    images = [f for f in spec.fields if f.kind == IMAGE]
    if config.model.subtract_background and images:
        try:
            make_encoder(images[0], torso, spec, subtract_background=True)
        except ValueError as err:
            raise ConfigError(
                "subtract_background", True, f"--no-subtract-background with --model {torso}"
                f" ({err})",
            ) from err  # fmt: skip


def check_logdir(config: Config) -> None:
    """The logdir can be written, no other live run uses it (this run takes its lock:
    `gazelle.algorithms.runlock`; the loop gives it back at the end), and (when resuming)
    it holds no other run's checkpoint."""
    logdir = config.run.folder()
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=logdir, prefix=".gazelle-write-test-"):
            pass
    except OSError as err:
        raise ConfigError(
            "logdir", str(logdir), f"a directory this user can create and write ({err.strerror})"
        ) from err
    runlock.acquire(logdir)  # bounded: flock with LOCK_NB, it never waits
    try:
        _check_resume(config, logdir)
    except BaseException:
        # why: a refused run gives the lock back, or the next run on this logdir would
        # report taking over the lock of a run "killed?"
        runlock.release(logdir)
        raise


def _check_resume(config: Config, logdir: Path) -> None:
    """When resuming: the logdir holds a run of this config's env, model, ... (`RESUME_KEYS`)."""
    saved_path = logdir / "config.json"
    if not (config.run.resume and (logdir / "checkpoint.pt").exists() and saved_path.exists()):
        return
    try:
        saved = saved_config(json.loads(saved_path.read_text()))
    except (ValueError, TypeError, ConfigError) as err:
        raise ConfigError(
            "logdir",
            str(logdir),
            f"a gazelle run's directory ({saved_path} is not a gazelle config: {err}), another "
            "--logdir, or --no-resume",
        ) from err
    for key in RESUME_KEYS:
        if saved.get(key) is not None and saved.get(key) != config.get(key):
            raise ConfigError(
                key,
                config.get(key),
                f"{saved.get(key)!r}, as the run in {logdir} that this one would resume; or "
                "another --logdir, or --no-resume",
            )


def check_wandb(config: Config) -> None:
    """A known --wandb-mode; with --wandb, the wandb package importable."""
    run = config.run
    # why: a bad mode is refused with or without --wandb, never silently ignored
    if run.wandb_mode is not None and run.wandb_mode not in WANDB_MODES:
        raise ConfigError("wandb_mode", run.wandb_mode, " | ".join(WANDB_MODES))
    if not run.wandb:
        return
    try:
        import wandb  # noqa: F401 - only whether it imports
    except ImportError as err:
        raise ConfigError(
            "wandb",
            True,
            "pip install 'gazelle[wandb]' (or pip install wandb) first, or no --wandb",
            problem="W&B tracking needs the wandb package, which is not installed",
        ) from err
