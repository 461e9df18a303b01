"""APPO's presets: IMPALA's preset of the same name and family, then APPO's own values."""

from __future__ import annotations

from typing import Any

from gazelle.algorithms.impala.presets import IMPALA_PRESETS

#: APPO: the IMPALA preset of the same family and name, then these. Several passes per
#: batch (epochs x minibatches optimiser steps), PPO's clip on the ratio to the actors'
#: policy, advantages normalised per minibatch (so the entropy weight is PPO's 0.01) and
#: V-trace's lambda 0.95 (GAE's usual value) for lower-variance targets.
APPO_PRESETS: dict[str, dict[str, Any]] = {
    family: dict(epochs=2, minibatches=2, clip_ratio=0.1, normalize_advantages=True,
                 vtrace_lambda=0.95, entropy_cost=0.01, learning_rate=0.0003,
                 optimizer="adam", epsilon=1e-8)
    for family in ("vector", "atari", "dmlab", "image", "vizdoom")
}  # fmt: skip
#: ViZDoom: PopArt (the IMPALA preset's) already puts the advantages in units of the returns'
#: spread; normalising them per minibatch as well froze HealthGathering at 284 with IMPALA's
#: loss (every game ended at the same tic), and without it APPO reached 1,707 at 800K frames
#: (docs/results.md, "ViZDoom").
APPO_PRESETS["vizdoom"].update(normalize_advantages=False)

#: preset name -> env family -> flat name -> value: IMPALA's, then `APPO_PRESETS`.
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    preset: {family: {**values, **APPO_PRESETS[family]} for family, values in families.items()}
    for preset, families in IMPALA_PRESETS.items()
}
