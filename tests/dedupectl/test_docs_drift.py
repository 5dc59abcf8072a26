"""The docs against the CLI and against themselves: every command has a reference page, every
``dedupectl …`` the docs show parses with this build's CLI (in its vocabulary: no retired spelling), and every
relative link resolves.

Commands are resolved through the Click command Typer builds from ``dedupectl.cli.app`` (duck-typed: Typer
may bring its own copy of Click); nothing is executed.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from dedupectl.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
PAGES = sorted([ROOT / "README.md", *DOCS.rglob("*.md")])

FENCE = re.compile(r"^(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
COMMAND_WORD = re.compile(r"^[a-z][a-z0-9-]*$")
# Shell words that end one command; whatever follows is not its arguments.
SHELL_BREAKS = {"|", "||", "&&", ";", "&", ">", ">>", "2>", "2>&1", "<", ")", "#"}
# Words that stand for "more arguments here" in prose and examples.
ELLIPSES = {"…", "...", "…)", "...)"}


@dataclass(frozen=True)
class Invocation:
    page: Path
    line: int
    words: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: dedupectl {' '.join(self.words)}"


def _cli() -> Any:
    return typer.main.get_command(app)


def _subcommands(command: Any) -> dict[str, Any] | None:
    """A group's commands by name; None for a command that is not a group."""
    return getattr(command, "commands", None)


def _command_paths(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    for name, command in sorted((_subcommands(group) or {}).items()):
        if command.hidden:
            continue
        path = (*prefix, name)
        paths.append(path)
        paths.extend(_command_paths(command, path))
    return paths


# -- reading markdown ---------------------------------------------------------------------------------------


def _split(page: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """The page's prose lines and code-block lines, each with its line number."""
    prose, code = [], []
    fence = None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        opening = FENCE.match(line.strip())
        if fence is None and opening:
            fence = opening.group(1)[0] * 3
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            prose.append((number, line))
        else:
            code.append((number, line))
    return prose, code


def _heading_texts(page: Path) -> list[str]:
    prose, _ = _split(page)
    return [match.group(2) for _, line in prose if (match := HEADING.match(line))]


# -- (a) every command has a reference page -----------------------------------------------------------------


def _paths_named_in_reference() -> set[tuple[str, ...]]:
    """Command paths the reference pages' headings name: each code span of a heading, without a leading
    ``dedupectl``, up to its first word that is not a command word (an argument such as ``ID``)."""
    named = set()
    for page in REFERENCE.glob("*.md"):
        for heading in _heading_texts(page):
            for _, span in INLINE_CODE.findall(heading):
                words = span.split()
                if words and words[0] == "dedupectl":
                    words = words[1:]
                path = []
                for word in words:
                    if not COMMAND_WORD.match(word):
                        break
                    path.append(word)
                if path:
                    named.add(tuple(path))
    return named


def test_every_command_has_a_reference_page() -> None:
    named = _paths_named_in_reference()
    missing = [
        " ".join(path) for path in _command_paths(_cli()) if not any(name[: len(path)] == path for name in named)
    ]
    assert not missing, f"commands with no heading in docs/reference/*.md: {missing}"


# -- (b) every invocation in the docs parses ----------------------------------------------------------------


def _words_after_dedupectl(text: str) -> list[tuple[str, ...]]:
    """The argument words of each ``dedupectl`` command in a line of shell (comments and what follows a pipe,
    ``&&`` or a redirection belong to other commands)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;<>()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote: the prose around a command, not a command
        return []
    found = []
    for at, word in enumerate(words):
        if word != "dedupectl":
            continue
        args = []
        for following in words[at + 1 :]:
            if following in SHELL_BREAKS or set(following) <= set("|&;<>()"):
                break
            args.append(following)
        found.append(tuple(args))
    return found


def _code_block_invocations(page: Path) -> list[Invocation]:
    _, code = _split(page)
    found = []
    pending, first = "", 0
    for number, line in code:
        if not pending:
            first = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text, pending = pending + line, ""
        # output shown in a block (log lines, tables) is not a command: only lines that start one
        stripped = text.strip()
        if stripped.startswith("#") or "dedupectl" not in stripped:
            continue
        for words in _words_after_dedupectl(stripped):
            found.append(Invocation(page, first, words))
    return found


def _inline_invocations(page: Path) -> list[Invocation]:
    prose, _ = _split(page)
    found = []
    for number, line in prose:
        for _, span in INLINE_CODE.findall(line):
            if span == "dedupectl" or not span.startswith("dedupectl "):
                continue
            for words in _words_after_dedupectl(span):
                found.append(Invocation(page, number, words))
    return found


def _invocations() -> list[Invocation]:
    return [found for page in PAGES for found in (*_code_block_invocations(page), *_inline_invocations(page))]


def _option_names(command: Any) -> dict[str, Any]:
    names = {}
    for param in command.params:
        if param.param_type_name == "option":
            for name in (*param.opts, *param.secondary_opts):
                names[name] = param
    return names


def _takes_value(option: Any) -> bool:
    return not (option.is_flag or option.count or option.nargs == 0)


def _problem(cli: Any, words: tuple[str, ...]) -> str | None:
    """What does not parse in ``dedupectl WORDS``, or None. Only the command path and the option names are
    checked: values and positional arguments in docs are often placeholders."""
    command = cli
    path = ["dedupectl"]
    at = 0
    while at < len(words):
        word = words[at]
        at += 1
        if word in ELLIPSES or word in ("-h", "--help"):
            return None
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            options = _option_names(command)
            if name not in options:
                return f"{' '.join(path)} has no option {name}"
            if options[name].hidden:  # still accepted, so old scripts run; the docs teach the one vocabulary
                return f"{' '.join(path)} {name} is a retired spelling (docs/reference/options.md)"
            if "=" not in word and _takes_value(options[name]):
                at += options[name].nargs
            continue
        commands = _subcommands(command)
        if commands is not None:
            if word not in commands:
                return f"{' '.join(path)} has no command {word!r}"
            command = commands[word]
            path.append(word)
    return None


def test_the_docs_show_invocations() -> None:
    # the scan below finds what it is meant to find
    pages = {found.page.name for found in _invocations()}
    assert {"README.md", "run.md", "snapshot.md", "worker-crashed.md"} <= pages


@pytest.mark.parametrize(
    ("words", "ok"),
    [
        (("run", "-t", "events", "--exit-on-idle", "3"), True),
        (("run", "-i", "events"), False),
        (("--debug", "run", "…"), True),
        (("snapshot", "create", "--location", "s3://bucket/prefix"), True),
        (("snapshot", "create", "--to", "s3://bucket/prefix"), False),
        (("reconcile", "--all", "--from", "2h", "--to", "1h"), True),
        (("dev", "broker", "start"), True),
        (("runn",), False),
        (("run", "--no-such-flag"), False),
        (("snapshot", "explode"), False),
    ],
)
def test_the_parse_check_itself(words: tuple[str, ...], ok: bool) -> None:
    assert (_problem(_cli(), words) is None) is ok


def test_every_invocation_in_the_docs_parses() -> None:
    cli = _cli()
    problems = [f"{found}: {problem}" for found in _invocations() if (problem := _problem(cli, found.words))]
    assert not problems, "\n".join(problems)


# -- (c) every relative link resolves -----------------------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: inline markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    anchors, seen = set(), {}
    for heading in _heading_texts(page):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _relative_links(page: Path) -> list[tuple[int, str]]:
    prose, _ = _split(page)
    links = []
    for number, line in prose:
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:, s3: …
                continue
            links.append((number, target))
    return links


def test_every_relative_link_resolves() -> None:
    broken = []
    for page in PAGES:
        for number, target in _relative_links(page):
            path_part, _, anchor = target.partition("#")
            destination = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(ROOT)}:{number}: {target}"
            if not destination.exists():
                broken.append(f"{where}: no such file")
            elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
                broken.append(f"{where}: no heading with that anchor")
    assert not broken, "\n".join(broken)
