"""What a newcomer reads is checked against the code: every `gazelle ...` command in
README.md, CONTRIBUTING.md and docs/*.md parses with the real CLI's parsers (the subcommand
and every flag exist; a command without placeholders parses whole, values included), and
every relative link and `#anchor` of those pages resolves. Fast: nothing runs."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from gazelle.cli import build_parser
from gazelle.config.flags import OneLineParser

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")],
    key=lambda p: str(p),
)
ALL_PAGES = [*PAGES, *sorted((ROOT / "docs" / "notes").glob("*.md"))]

#: A value a reader substitutes (N, DIR, HOST:PORT, <run>, ...): the command is then only
#: checked for its subcommand and flag names, not parsed whole.
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_:]*$|<|\.\.\.|\bX\b|YOUR_")
FENCE = re.compile(r"^```(\w*)\s*$")
INLINE = re.compile(r"`(gazelle (?:train|test|bench|plot|suite)(?:\s[^`]*)?)`")


def _commands(page: Path) -> list[tuple[int, str, bool]]:
    """(line, command, whole) for each `gazelle ...` command of a page: the lines of shell
    code blocks (a `$ ` prompt, `VAR=value` prefixes and a trailing `# comment` removed;
    `\\` continuations joined), to parse whole, and the inline code spans that start with a
    subcommand (prose: `gazelle train --logdir` names a flag), whose flags must exist."""
    found: list[tuple[int, str, bool]] = []
    lines = page.read_text().splitlines()
    in_code, shell, pending, start = False, False, "", 0
    for number, line in enumerate(lines, 1):
        fence = FENCE.match(line.strip())
        if fence:
            in_code = not in_code
            shell = in_code and fence.group(1) in ("bash", "sh", "shell", "console", "")
            continue
        if in_code and shell:
            text = line.strip()
            if pending:
                text, pending = pending + " " + text, ""
            else:
                start = number
            if text.endswith("\\"):
                pending = text[:-1]
                continue
            text = re.split(r"\s+#\s", re.sub(r"^\$ ", "", text), maxsplit=1)[0]
            for part in re.split(r"\s*(?:&&|;|\|\|)\s*", text):  # `pip install ... && gazelle`
                part = re.sub(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+", "", part)  # VAR=value prefixes
                if re.match(r"gazelle (train|test|bench|plot|suite)(\s|$)|gazelle$", part):
                    found.append((start, part, True))
        elif not in_code:
            found.extend((number, m.group(1), False) for m in INLINE.finditer(line))
    return found


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _bench_parser(what: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser `gazelle bench [what]` builds (taken as it parses, before anything runs)."""
    from gazelle.bench import env, models
    from gazelle.bench import train as bench_train

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Captured(self)

    main = {"models": models.main, "env": env.main, "train": bench_train.main}[what]
    with monkeypatch.context() as patch:
        patch.setattr(OneLineParser, "parse_args", capture)
        try:
            main([])
        except _Captured as captured:
            return captured.parser
    raise AssertionError(f"gazelle bench {what} built no parser")


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def _parsers(monkeypatch: pytest.MonkeyPatch) -> dict[str, argparse.ArgumentParser]:
    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    parsers = {name: sub.choices[name] for name in ("train", "test", "plot", "suite")}
    for what in ("train", "models", "env"):
        parsers[f"bench {what}"] = _bench_parser(what, monkeypatch)
    return parsers


def _check(
    command: str, parsers: dict[str, argparse.ArgumentParser], whole: bool = True
) -> str | None:
    """What is wrong with `command` (None: nothing); `whole`: it must parse as it is,
    values included, unless it holds a placeholder or asks for --help."""
    # why: `[--ray-address HOST:PORT]` in a synopsis is an optional part: check it too
    words = shlex.split(command.replace("[", " ").replace("]", " "))[1:]
    if not words:
        return None  # bare `gazelle`: the top-level usage
    name, rest = words[0], words[1:]
    if name == "bench":
        what = rest[0] if rest and rest[0] in ("train", "models", "env") else "train"
        rest = rest[1:] if rest and rest[0] == what else rest
        name = f"bench {what}"
    parser = parsers.get(name)
    if parser is None:
        return f"no subcommand {name!r}"
    known = _flags(parser)
    unknown = [w.split("=")[0] for w in rest if w.startswith("--") and w.split("=")[0] not in known]
    if unknown:
        return f"{name}: no flag {', '.join(unknown)}"
    if not whole or any(PLACEHOLDER.search(w) for w in rest) or {"-h", "--help"} & set(rest):
        return None
    try:
        parser.parse_args(rest)
    except SystemExit:
        return f"{name}: does not parse"
    return None


def test_every_gazelle_command_in_the_docs_parses(monkeypatch, capsys):
    parsers = _parsers(monkeypatch)
    checked, wrong = 0, []
    for page in PAGES:
        for line, command, whole in _commands(page):
            checked += 1
            problem = _check(command, parsers, whole)
            if problem:
                wrong.append(f"{page.relative_to(ROOT)}:{line}: {command!r}: {problem}")
    capsys.readouterr()  # why: argparse's messages for the failures; the list says them
    assert not wrong, "\n".join(wrong)
    assert checked > 50, checked  # why: the extraction itself broke if it finds few


def test_the_command_check_catches_a_wrong_flag_and_a_wrong_value(monkeypatch, capsys):
    parsers = _parsers(monkeypatch)
    assert _check("gazelle train --env CartPole-v1 --batch-size 8", parsers) is None
    assert "no flag --batchsize" in str(_check("gazelle train --batchsize 8", parsers))
    assert "does not parse" in str(_check("gazelle train --batch-size eight", parsers))
    assert "no flag --num-actors" in str(_check("gazelle bench models --num-actors 2", parsers))
    assert _check("gazelle bench --env ALE/Pong-v5 --num-actors 2", parsers) is None
    assert _check("gazelle test --logdir runs/<run> --video 1", parsers) is None
    assert "no subcommand" in str(_check("gazelle evaluate --logdir x", parsers))


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces as
    hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _broken_links(page: Path) -> list[str]:
    broken = []
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here (no network)
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(f"{page.relative_to(ROOT)}: {target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
            broken.append(f"{page.relative_to(ROOT)}: {target}: no heading #{anchor}")
    return broken


def test_every_relative_link_and_anchor_resolves():
    broken = [b for page in ALL_PAGES for b in _broken_links(page)]
    assert not broken, "\n".join(broken)


def test_the_link_check_catches_a_missing_file_and_anchor(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A `code` heading, with words\n")
    page.write_text(
        "[ok](other.md#a-code-heading-with-words) [self](#top) [gone](missing.md) "
        "[no anchor](other.md#nowhere) [web](https://example.com)\n\n# Top\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        broken = _broken_links(page)
    finally:
        ROOT = saved
    assert broken == [
        "page.md: missing.md: no such file",
        "page.md: other.md#nowhere: no heading #nowhere",
    ]
