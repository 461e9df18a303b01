"""`gazelle suite`: a named suite of games at a fixed budget per game, over seeds, and a
report of it that users can cite (per game spread, thresholds, human-normalised scores;
median and IQM with stratified-bootstrap intervals; curves).

`spec` reads the suite from the flags, `runner` runs each (game, seed) as an ordinary
`gazelle train` process, one after another, resumably, `report` reads the runs' own files
into report.json and report.md, and `stats` holds the aggregate numerics.
"""

from gazelle.suite.report import write_report
from gazelle.suite.runner import run_suite
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
