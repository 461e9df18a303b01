"""docs/cli.md matches the code: every flag documented, nothing stale."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from gazelle import clidoc
from gazelle.cli import build_parser
from gazelle.config import all_fields

PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def _train_part(text: str) -> str:
    return text.split("## `gazelle test`")[0]


def test_the_train_reference_is_what_the_config_renders():
    # why only this part exactly: it is rendered by gazelle alone; the other commands' help
    # is argparse's text, whose wording changes between Python versions (checked below).
    assert _train_part(PAGE.read_text()) == _train_part(clidoc.render()), (
        "docs/cli.md is stale: python -m gazelle.clidoc > docs/cli.md"
    )


def test_every_train_flag_is_on_the_page_and_no_other():
    page = _train_part(PAGE.read_text())
    documented = set(re.findall(r"^\| `--([a-z0-9-]+)", page, flags=re.M))
    assert documented == {name.replace("_", "-") for name in all_fields()}


def test_every_option_of_test_bench_and_plot_is_on_the_page():
    from gazelle.bench.train import build_parser as bench_parser

    page = PAGE.read_text()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parsers = {
        "gazelle test": sub.choices["test"],
        "gazelle bench [train]": bench_parser(),
        "gazelle plot": sub.choices["plot"],
    }
    for title, parser in parsers.items():
        section = page.split(f"## `{title}`")[1].split("\n## ")[0]
        for action in parser._actions:
            for option in action.option_strings:
                assert option in section, (title, option)
