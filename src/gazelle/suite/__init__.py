"""`gazelle suite`: a named suite of games at a fixed budget per game, over seeds, and a
report of it that users can cite (per game spread, thresholds, human-normalised scores;
median and IQM with stratified-bootstrap intervals; curves).

`spec` and `flags` read the suite from the flags, `dispatch` picks the (game, seed) pairs
that still need a run (resumably) and runs them one after another here or as Ray tasks
(`on_ray`), `runner` runs one as an ordinary `gazelle train` process, `pairs` holds each
pair's files, `report` reads them into report.json and report.md, and `stats` holds the
aggregate numerics.
"""

from gazelle.suite.dispatch import run_suite
from gazelle.suite.report import write_report
from gazelle.suite.spec import SUITES, SuiteSpec, parse_games, parse_thresholds, read_scores
from gazelle.suite.stats import iqm, median_of_means, stratified_bootstrap_ci

__all__ = [
    "SUITES",
    "SuiteSpec",
    "iqm",
    "median_of_means",
    "parse_games",
    "parse_thresholds",
    "read_scores",
    "run_suite",
    "stratified_bootstrap_ci",
    "write_report",
]
