"""docs/presets.md matches the code: every preset's resolved values, nothing stale."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gazelle import presetdoc
from gazelle.algorithms.impala.presets import IMPALA_PRESETS
from gazelle.config import registry

PAGE = Path(__file__).resolve().parents[1] / "docs" / "presets.md"


def test_the_page_is_what_the_presets_render():
    assert PAGE.read_text() == presetdoc.render(), (
        "docs/presets.md is stale: python -m gazelle.presetdoc > docs/presets.md"
    )


def test_every_algorithm_preset_and_family_has_its_table():
    page = PAGE.read_text()
    for algorithm in registry.algorithms():
        for preset, families in algorithm.presets.items():
            heading = f"### `--algo {algorithm.name} --preset {preset}`"
            assert heading in page, heading
            table = page.split(heading)[1].split("\n### ")[0].split("\n## ")[0]
            header = next(line for line in table.splitlines() if line.startswith("| flag"))
            assert set(re.findall(r"\| (\w+)", header)) - {"flag"} == set(families)


def test_a_changed_preset_value_changes_the_page(monkeypatch: pytest.MonkeyPatch):
    """The page is read from the presets, not copied: change one value, the render differs
    (and the first test would fail on the page as committed)."""
    before = presetdoc.render()
    monkeypatch.setitem(IMPALA_PRESETS["gazelle"]["atari"], "batch_size", 12)
    after = presetdoc.render()
    assert after != before
    impala = after.split("### `--algo impala --preset gazelle`")[1].split("\n### ")[0]
    assert re.search(r"^\| `--batch-size` \| 16 \| 16 \| 16 \| 12 \|", impala, flags=re.M)
