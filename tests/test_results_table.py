"""benchmarks/results_table.py: docs/results.md's tables are re-derived from the kept runs
(benchmarks/results), and a figure changed by hand on the page or in README fails the check."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "results_table", ROOT / "benchmarks" / "results_table.py"
)
results_table = importlib.util.module_from_spec(spec)
sys.modules["results_table"] = results_table
spec.loader.exec_module(results_table)


def test_every_figure_of_the_results_page_is_the_kept_data_s(capsys):
    assert results_table.main(["--check"]) == 0, capsys.readouterr().err


def copy_of_the_docs(tmp_path: Path) -> Path:
    """README.md and docs/ as they are, to change by hand."""
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


def test_a_figure_changed_by_hand_on_the_page_fails_the_check(tmp_path, capsys):
    root = copy_of_the_docs(tmp_path)
    page = root / "docs" / "results.md"
    args = ["--check", "--page", str(page), "--root", str(root)]
    assert results_table.main(args) == 0, capsys.readouterr().err
    text = page.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| A1 |"))
    assert "**13.1 min**" in row  # Pong's median over 3 seeds, from the kept runs
    page.write_text(text.replace(row, row.replace("**13.1 min**", "**12.1 min**")))
    assert results_table.main(args) == 1
    err = capsys.readouterr().err
    assert "differ from the kept data" in err and "12.1 min" in err and "13.1 min" in err
    # a seed count rounded up by hand fails as well
    page.write_text(text.replace(row, row.replace("| 3 of 3 |", "| 4 of 4 |")))
    assert results_table.main(args) == 1
    # and so does a row whose data is gone
    page.write_text(text)
    runs = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", runs)
    shutil.rmtree(runs / "slots" / "tts-pong-3seeds" / "seed-2")
    assert results_table.main([*args, "--results", str(runs)]) == 1
    assert "3 of 3" in text and "differ from the kept data" in capsys.readouterr().err


def test_a_readme_figure_changed_by_hand_fails_the_check(tmp_path, capsys):
    root = copy_of_the_docs(tmp_path)
    args = ["--check", "--root", str(root)]
    readme = root / "README.md"
    text = readme.read_text()
    assert "100 in a median of 27.6 min (2 of 3 seeds reached it" in text
    readme.write_text(text.replace("(2 of 3 seeds reached it", "(3 of 3 seeds reached it"))
    assert results_table.main(args) == 1
    assert "README.md does not say '100 in a median of 27.6 min" in capsys.readouterr().err


def kept_seed(results: Path, name: str, seed: int, rows: list[dict], command=None) -> None:
    """A run as keep_runs.py keeps it, launched at t=1000 s."""
    logdir = results / name / f"seed-{seed}"
    logdir.mkdir(parents=True)
    argv = command or ["gazelle", "train", "--env", "Pong"]
    launch = {"launched": 1000.0, "command": [*argv, "--seed", str(seed), "--logdir", "x"],
              "speed_before": 500.0, "speed_after": 700.0}  # fmt: skip
    (logdir / "launch.json").write_text(json.dumps(launch))
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (logdir / "progress.jsonl.gz").write_bytes(gzip.compress(text.encode()))


def at(minute: float, frames: int, value: float, fps: float = 1000.0) -> dict:
    return {"frames": frames, "wall_time": 1000.0 + 60 * minute, "episode_return": value,
            "episode_window": 100, "fps": fps}  # fmt: skip


SPEC = """
size_budget_bytes = 1_000_000
[[row]]
id = "X1"
table = "t"
env = "Pong"
algorithm = "IMPALA"
budget = "30 min"
threshold = 18
figure = "time"
runs = ["pong/seed-*"]
quote = "18 in a median of {median} min ({reached} of {runs} seeds"
[[row]]
id = "X2"
table = "t"
env = "Pong"
algorithm = "IMPALA"
budget = "2M frames"
figure = "return"
runs = ["pong/seed-*"]
"""


def synthetic(tmp_path: Path, spec_text: str = SPEC) -> tuple[Path, list[str]]:
    results = tmp_path / "results"
    kept_seed(results, "pong", 1, [at(5, 1_000_000, 10.0), at(12, 2_000_000, 18.5)])
    kept_seed(results, "pong", 2, [at(5, 1_000_000, 0.0), at(20, 2_000_000, 19.0, 900.0)])
    kept_seed(results, "pong", 3, [at(10, 1_000_000, -5.0), at(30, 2_500_000, 17.0, 800.0)])
    (tmp_path / "table.toml").write_text(spec_text)
    (tmp_path / "page.md").write_text("# R\n\n<!-- results:t -->\n<!-- /results -->\n")
    (tmp_path / "README.md").write_text("Pong: 18 in a median of 20.0 min (2 of 3 seeds).\n")
    args = ["--page", str(tmp_path / "page.md"), "--spec", str(tmp_path / "table.toml"),
            "--results", str(results), "--root", str(tmp_path)]  # fmt: skip
    return results, args


def test_the_figures_are_the_hand_computed_ones_with_the_miss_counted(tmp_path, capsys):
    _, args = synthetic(tmp_path)
    assert results_table.main(args) == 0, capsys.readouterr().err
    rows = [line for line in (tmp_path / "page.md").read_text().splitlines() if "| X" in line]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    # to 18 within 30 minutes: seed 1 at 12 min, seed 2 at 20, seed 3 never (17.0 at 30):
    # the median of 12, 20 and a miss is 20; frames: 2M, 2M and a miss
    assert cells[0][5:9] == [
        "**20.0 min**, 2.00M frames", "2 of 3",
        "12.0-20.0 min, 2.00M-2.00M; seed 3 not reached: 17.0 at 30.0 min, 2.50M",
        "900; speed check 600 it/s",
    ]  # fmt: skip
    assert cells[0][9] == "`gazelle train --env Pong`" and cells[0][10] == "`pong`"
    # the return at 2M frames (the last row within it): 18.5, 19.0 and -5.0
    assert cells[1][5:8] == ["**18.5**", "no threshold; 3 seeds run", "-5.0 to 19.0"]
    assert results_table.main(["--check", *args]) == 0


def test_a_run_stopped_short_of_its_budget_is_not_counted_as_a_miss(tmp_path, capsys):
    results, args = synthetic(tmp_path)
    kept_seed(results, "pong", 4, [at(5, 1_000_000, 2.0)])  # stopped at 5 of 30 minutes
    assert results_table.main(args) == 1
    assert "a stopped run is not a miss" in capsys.readouterr().err


def test_seeds_of_one_row_must_have_run_one_command(tmp_path, capsys):
    results, args = synthetic(tmp_path)
    rows = [at(5, 1_000_000, 19.0), at(31, 2_000_000, 19.0)]
    kept_seed(results, "pong", 4, rows, ["gazelle", "train", "--env", "X"])
    assert results_table.main(args) == 1
    assert "different commands" in capsys.readouterr().err


def test_the_kept_data_must_stay_within_its_size_budget(tmp_path, capsys):
    _, args = synthetic(tmp_path, SPEC.replace("1_000_000", "100"))
    assert results_table.main(args) == 1
    assert "over its budget of 100 " in capsys.readouterr().err


NOT_KEPT = """
[[row]]
id = "X3"
table = "t"
env = "Doom"
algorithm = "APPO"
budget = "30 min"
figure = "return"
kept = false
reported = { median = "78", reached = "1 of 1", spread = "one seed", fps = "-", command = "c" }
"""


def test_a_row_without_kept_runs_says_so_and_gives_what_was_reported(tmp_path, capsys):
    _, args = synthetic(tmp_path, SPEC + NOT_KEPT)
    assert results_table.main(args) == 0, capsys.readouterr().err
    row = next(r for r in (tmp_path / "page.md").read_text().splitlines() if "| X3 |" in r)
    assert row.endswith("| 78 | 1 of 1 | one seed | - | `c` | **not kept: not re-derivable** |")


@pytest.mark.parametrize("budget", ["25", "25 minutes", "1.5G frames"])
def test_a_budget_must_say_minutes_or_frames(budget):
    with pytest.raises(results_table.TableError, match="budget"):
        results_table.Budget.parse(budget)
