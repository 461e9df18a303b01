"""What a suite is: its games, seeds, budget and reference scores, read from the flags.

`SUITES` holds the named suites. Atari-5 (Aitchison, Sweetser and Hutter, "Atari-5:
Distilling the Arcade Learning Environment down to Five Games", ICML 2023) is the five games
whose scores best predict the median human-normalised score over all 57.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gazelle.config import ConfigError

#: Suite name -> its env ids, in report order.
SUITES: dict[str, tuple[str, ...]] = {
    "atari5": tuple(
        f"{game}NoFrameskip-v4"
        for game in ("BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert")
    ),
}

#: An env id (`CartPole-v1`, `ALE/Pong-v5`, `gazelle/Catch-v0`, `module:Env-v0`), as opposed
#: to a suite name.
_ENV_ID = re.compile(r"-v\d+$|[/:]")


@dataclass(frozen=True)
class SuiteSpec:
    """One suite to run: every (game, seed) pair is a `gazelle train` run under `out`."""

    #: the `--suite` value as given (a suite's name, or the comma list)
    name: str
    #: env ids, in report order
    games: tuple[str, ...]
    #: the seeds every game runs with
    seeds: tuple[int, ...]
    #: env frames per run (`--frames`); None with a minutes budget
    frames: int | None
    #: minutes of training per run (`--minutes`); None with a frames budget
    minutes: float | None
    #: the suite's directory: one folder per game, the reports
    out: Path
    #: `gazelle train` flags passed to every run, as typed
    train_args: tuple[str, ...] = ()
    #: env id -> the return a seed must reach (recent mean over a full window)
    thresholds: Mapping[str, float] | None = None
    #: env id -> (random, human) reference returns, over the built-in tables
    scores: Mapping[str, tuple[float, float]] | None = None
    #: run again the runs that failed (by default a failed run stays failed in the report)
    retry_failed: bool = False
    #: where the runs go: "local" (one after another here) or "ray" (Ray tasks, side by side)
    backend: str = "local"
    #: the Ray cluster to join (`--suite-ray-address`); None: a private Ray instance here
    ray_address: str | None = None
    #: join a Ray cluster that answers clients without a token (`--suite-ray-allow-tokenless`)
    ray_allow_tokenless: bool = False
    #: CPUs each run's Ray task asks for; None: a whole node (the largest node's CPUs)
    run_cpus: float | None = None
    #: GPUs each run's Ray task asks for; None: 1 when the cluster has a GPU, else 0
    run_gpus: float | None = None


def parse_games(value: str) -> tuple[str, ...]:
    """`atari5` -> its games; `ENV1,ENV2` -> those ids; else a ConfigError naming the value."""
    value = value.strip()
    if value in SUITES:
        return SUITES[value]
    games = tuple(part.strip() for part in value.split(","))
    if "," in value or _ENV_ID.search(value):
        if not all(games) or len(set(games)) != len(games):
            raise ConfigError(
                "suite", value, "a comma list that names each env id once, with none empty"
            )
        return games
    allowed = f"{', '.join(SUITES)}, or a comma list of env ids (e.g. CartPole-v1,Acrobot-v1)"
    raise ConfigError("suite", value, allowed, f"no suite named {value!r}")


def parse_thresholds(values: Sequence[str], games: Sequence[str]) -> dict[str, float]:
    """`["ENV=VALUE", ...]` -> {env: value}; each env must be one of the suite's games."""
    found: dict[str, float] = {}
    for text in values:
        env, sep, number = text.rpartition("=")
        try:
            value = float(number)
        except ValueError:
            value = math.nan
        if not sep or env not in games or not math.isfinite(value):
            allowed = f"ENV=VALUE, ENV one of {', '.join(games)}, VALUE a finite number"
            raise ConfigError("threshold", text, allowed)
        found[env] = value
    return found


#: What a `--scores` file holds.
FORM = "JSON or TOML of env id -> {random, human}, two different finite numbers each"


def read_scores(path: str | Path) -> dict[str, tuple[float, float]]:
    """A user's reference table, JSON or TOML (by suffix; else JSON): env id -> {random,
    human}. A ConfigError naming the file and the entry when it is not of that form."""
    path = Path(path)
    try:
        text = path.read_text()
        if path.suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib
            raw = tomllib.loads(text)
        else:
            raw = json.loads(text)
    except (OSError, ValueError) as err:
        raise ConfigError("scores", str(path), FORM, f"cannot read {str(path)!r} ({err})") from err
    if not isinstance(raw, dict):
        raise ConfigError("scores", str(path), FORM)
    table: dict[str, tuple[float, float]] = {}
    for env, entry in raw.items():
        try:
            random, human = float(entry["random"]), float(entry["human"])
        except (TypeError, KeyError, ValueError):
            random = human = math.nan
        if not (math.isfinite(random) and math.isfinite(human)) or random == human:
            raise ConfigError(
                "scores", str(path), FORM, f"{str(path)!r}: bad entry {env!r}: {entry!r}"
            )
        table[str(env)] = (random, human)
    return table


def folder_name(env_id: str) -> str:
    """A game's folder under the suite's directory: the env id with `/` and `:` as `_`."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", env_id)
