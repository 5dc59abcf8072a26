"""Help reads at 80 columns, in a terminal or a pipe: no line wider, no word broken, flags show no value, and
every example is a whole shell command."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from dedupectl.cli.app import app
from dedupectl.cli.helpformat import shell_lines

WIDTH = 80
runner = CliRunner()


def _paths(command, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], bool]]:
    """Every command path, and whether it is a command (not a group)."""
    commands = getattr(command, "commands", None)
    paths = [(prefix, commands is None)]
    for name, sub in (commands or {}).items():
        if not sub.hidden:
            paths.extend(_paths(sub, (*prefix, name)))
    return paths


def _help(path: tuple[str, ...]) -> str:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    return result.stdout


PATHS = _paths(typer.main.get_command(app))


@pytest.mark.parametrize(("path", "leaf"), PATHS, ids=[" ".join(path) or "dedupectl" for path, _ in PATHS])
def test_help_reads_at_80_columns(path: tuple[str, ...], leaf: bool) -> None:
    text = _help(path)
    assert all(len(line) <= WIDTH for line in text.splitlines()), text
    assert "<bool>" not in text, "a flag takes no value"
    broken = [line for line in text.splitlines() if re.search(r"\w-$", line.rstrip())]
    assert not broken, f"a word broken at its hyphen: {broken}"
    if leaf:
        assert re.search(r"Example:\n    [^\n]*dedupectl ", text), "every command shows an example, as a command"
    else:  # a group lists each of its commands
        group = typer.main.get_command(app)
        for name in path:
            group = group.commands[name]
        listed = text.split("Commands:", 1)[-1] if "Commands:" in text else ""
        missing = [name for name, sub in group.commands.items() if not sub.hidden and f"  {name} " not in listed]
        assert not missing, f"commands missing from the help: {missing}"


def test_flags_show_no_value() -> None:
    text = _help(("reconcile",))
    for flag in ("--all", "--apply", "--json", "-h, --help"):
        line = next(line for line in text.splitlines() if line.strip().startswith(flag))
        assert line.split()[len(flag.split())] not in ("<bool>", "BOOLEAN"), line


def test_a_long_example_is_continued_between_words() -> None:
    command = "dedupectl run -b 127.0.0.1:9092 -t events -o events-deduped -d /var/lib/dedupectl"
    lines = shell_lines(command, 50)
    assert len(lines) > 1 and all(len(line) <= 50 for line in lines)
    assert all(line.endswith(" \\") for line in lines[:-1])
    assert all(line.startswith("    -") for line in lines[1:]), "an option stays with its value"
    assert " ".join(line.rstrip(" \\") for line in lines).split() == command.split()
