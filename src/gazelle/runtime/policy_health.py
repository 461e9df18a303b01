"""A policy that stopped exploring before it learned: `DeadPolicyWatch`.

Measured (docs/notes/lstm.md, "A3C at the vector preset's rate"): A3C's CartPole agent with
the LSTM at one rate went deterministic within 90K frames on 2 seeds of 2. Its entropy fell
to 1e-4 (of ln 2 = 0.69), every episode lasted 9.4 steps (one push, always the same way;
random play lasts ~22), and the policy head's gradient fell to 5e-5: sampled actions all
agree, so a policy gradient has nothing to compare. One seed never came back in 1M frames,
the other after ~420K. No warning fired: the torso's weights kept moving (`StallWatch`) and
the gates were not saturated (`SaturationWatch`). This watch reads the symptom itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from gazelle.actions import BERNOULLI, CATEGORICAL, ActionSpec

#: A policy with less than this share of its largest entropy is taken to be deterministic.
#: The dead A3C runs above: 1e-4 to 1.1e-2 of ln 2 at the median of their dead stretches
#: (0.0001-0.0114 nats); learning ones keep 0.5-0.8 of it on CartPole.
DEAD_SHARE = 0.02

#: Frames a deterministic, not-better policy must last before the warning.
PATIENCE_FRAMES = 50_000


def max_entropy(actions: ActionSpec) -> float | None:
    """The largest entropy of a policy over `actions` (nats): the sum over its components,
    `ln n` per categorical of n choices, `ln 2` per bit; None with a Gaussian component
    (a density's entropy has no maximum)."""
    total = 0.0
    for component in actions.components:
        if component.kind == CATEGORICAL:
            total += math.log(component.size)
        elif component.kind == BERNOULLI:
            total += component.size * math.log(2.0)
        else:
            return None
    return total


class DeadPolicyWatch:
    """Warns once when the policy's entropy has stayed below `share` of its largest for
    `patience_frames` frames while the windowed episode return was no better than the first
    one the run measured (the return of a policy that had not learned yet; `no_better_than`).

    A policy that learned and then went deterministic (a solved task) returns more than at
    its start and is never warned about. Fed once per progress row; `max_entropy` None (a
    Gaussian component, or unknown) watches nothing. `warn` receives one line; it is called
    again only after the entropy recovers above the floor and falls anew.
    """

    def __init__(
        self,
        max_entropy: float | None,
        share: float = DEAD_SHARE,
        patience_frames: int | None = None,
        warn: Callable[[str], None] = print,
    ) -> None:
        """`patience_frames`: None for `PATIENCE_FRAMES`."""
        self.floor = None if not max_entropy else share * max_entropy
        self.max_entropy, self.warn = max_entropy, warn
        self.patience_frames = PATIENCE_FRAMES if patience_frames is None else patience_frames
        self.first_return: float | None = None
        self._since: int | None = None
        self._warned = False

    def no_better_than(self) -> float:
        """The largest return still counted as the start's: the first one plus a tenth of
        its size (the windowed mean of a fixed policy wanders: 9.17-9.43 for CartPole's
        one push)."""
        first = float(self.first_return or 0.0)
        return first + 0.1 * abs(first) + 1e-3

    def update(self, frames: int, entropy: float | None, episode_return: float | None) -> bool:
        """One progress row's frames, policy entropy and windowed return (None where not
        measured yet); returns True when it warned now."""
        if self.floor is None or entropy is None or not math.isfinite(entropy):
            return False
        if self.first_return is None and episode_return is not None:
            self.first_return = episode_return
        if entropy >= self.floor:
            self._since, self._warned = None, False
            return False
        not_better = episode_return is None or (
            self.first_return is not None and episode_return <= self.no_better_than()
        )
        if not not_better:
            self._since = None
            return False
        if self._since is None:
            self._since = frames
        if self._warned or frames - self._since < self.patience_frames:
            return False
        self._warned = True
        start = "" if self.first_return is None else f" (first measured: {self.first_return:g})"
        now = "not measured yet" if episode_return is None else f"{episode_return:g}"
        self.warn(
            f"gazelle: warning: the policy has been deterministic for {frames - self._since:,} "
            f"frames (entropy {entropy:.2g} of at most {self.max_entropy:.3g}) and its return "
            f"is no better than at the start: {now}{start}. Its sampled actions all agree, "
            "so the policy gradient has nothing to compare: it may never recover. Usual "
            "causes: updates too large for the policy (a lower --learning-rate; with the "
            "LSTM, --lstm-lr-scale 0.1), or too little entropy bonus (--entropy-cost)"
        )
        return True
