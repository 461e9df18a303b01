"""docs/reliability.md holds its promise: every row of its tables names the test that
proves it (a file and a test function that exist), the backend and the algorithm, and no
row says it has none."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"`(?:(test_\w+\.py))?(?:::(\w+))?(?:\[[^\]]*\])?[^`]*`")


def rows() -> list[dict[str, str]]:
    """Each table row as header -> cell."""
    found, header = [], None
    for line in (ROOT / "docs" / "reliability.md").read_text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if header is None:
            header = cells
        elif not set(line) <= set("|- "):
            found.append(dict(zip(header, cells)))
    return found


def test_every_row_names_an_existing_test_its_backend_and_algorithm():
    table = [row for row in rows() if "test" in row]
    assert len(table) >= 40
    defined = {
        path.name: set(re.findall(r"^def (test_\w+)", path.read_text(), re.M))
        for path in (ROOT / "tests").glob("test_*.py")
    }
    for row in table:
        what = (row.get("guarantee") or row.get("fault") or "")[:80]
        assert row.get("backend") and row.get("algorithm"), what
        assert "none" not in row["test"].lower().split(), what
        current, named = None, 0
        for file, name in NAMED.findall(row["test"]):
            current = file or current
            if name:
                assert current in defined, (what, current)
                assert name in defined[current], (what, current, name)
                named += 1
            elif file:
                assert file in defined, (what, file)
                named += 1
        assert named, what
