"""Help for people, at the terminal's width (80 in a pipe): Click's plain layout, which loads no markdown
renderer, with each paragraph of a docstring reflowed, the ``Example:`` paragraph kept as a shell command
(continued with a backslash, never broken inside a word), and a group's commands listed with their whole
summary (wrapped, not cut at the first sentence). Flags show no value."""

from __future__ import annotations

import re
import textwrap
from typing import Any

import typer
from typer._click.exceptions import NoSuchOption
from typer.core import TyperCommand, TyperGroup

EXAMPLE = "Example:"
_INDENT = 2  # Click indents the help text by two columns
_VALUE = re.compile(r"\s+<[^>]*>$")
_LIST = re.compile(r"<list\[(\w+)\]>")


def _paragraphs(text: str) -> list[str]:
    return [" ".join(block.split()) for block in re.split(r"\n\s*\n", text.strip()) if block.strip()]


def summary(command: Any) -> str:
    """A command's first paragraph, on one line (its short help, where it set one)."""
    if command.short_help:
        return command.short_help
    paragraphs = _paragraphs(command.help or "")
    return paragraphs[0] if paragraphs else ""


def _shell_words(command: str) -> list[str]:
    """The command's words, an option kept with its value."""
    words: list[str] = []
    for word in command.split():
        if words and words[-1].startswith("-") and " " not in words[-1] and not word.startswith("-"):
            words[-1] += " " + word
        else:
            words.append(word)
    return words


def shell_lines(command: str, width: int) -> list[str]:
    """A shell command in lines no wider than ``width``, continued with `` \\`` between words (an option
    and its value stay on one line)."""
    lines: list[str] = []
    current = ""
    for word in _shell_words(command):
        candidate = f"{current} {word}" if current else word
        if current and len(candidate) + 2 > width:  # room for " \"
            lines.append(current + " \\")
            current = "    " + word
        else:
            current = candidate
    return [*lines, current] if current else lines


def _wrap(text: str, width: int) -> list[str]:
    # never inside a word: not at a hyphen (dedupectl-data, <data-dir>), never a long word cut
    return textwrap.wrap(text, max(width, 10), break_on_hyphens=False, break_long_words=False) or [""]


def write_dl(formatter, rows: list[tuple[str, str]], col_max: int = 30, spacing: int = 2) -> None:
    """Click's definition list (options, commands), wrapped only between words."""
    first_col = min(max(len(first) for first, _ in rows), col_max) + spacing
    indent = " " * formatter.current_indent
    for first, second in rows:
        formatter.write(f"{indent}{first}")
        if not second:
            formatter.write("\n")
            continue
        if len(first) <= first_col - spacing:
            formatter.write(" " * (first_col - len(first)))
        else:
            formatter.write("\n" + indent + " " * first_col)
        lines = _wrap(second, formatter.width - formatter.current_indent - first_col)
        formatter.write(lines[0] + "\n")
        for line in lines[1:]:
            formatter.write(f"{indent}{'':>{first_col}}{line}\n")


# Spellings renamed to the one vocabulary (docs/reference/options.md): where one did not ship it is refused,
# and the refusal names today's spelling
RENAMED = {
    "-i": "the input topic is -t/--topic",
    "--input-topic": "the input topic is -t/--topic",
}


class HelpText:
    """The help text of a command or group, paragraph by paragraph; a renamed option's refusal says its name."""

    help: str | None

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)  # type: ignore[misc]
        except NoSuchOption as error:
            if error.option_name in RENAMED:
                error.message = f"{error.message}: {RENAMED[error.option_name]}"
            raise

    def format_help_text(self, ctx: typer.Context, formatter) -> None:
        paragraphs = _paragraphs(self.help or "")
        if not paragraphs:
            return
        formatter.write_paragraph()
        width = formatter.width - formatter.current_indent - _INDENT
        with formatter.indentation():
            for index, paragraph in enumerate(paragraphs):
                if index:
                    formatter.write_paragraph()
                if paragraph.startswith(EXAMPLE):
                    formatter.write_text(EXAMPLE)
                    with formatter.indentation():
                        for line in shell_lines(paragraph[len(EXAMPLE) :].strip(), width - _INDENT):
                            formatter.write(f"{'':>{formatter.current_indent}}{line}\n")
                else:
                    for line in _wrap(paragraph, width):
                        formatter.write(f"{'':>{formatter.current_indent}}{line}\n")

    def format_options(self, ctx: typer.Context, formatter) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):  # type: ignore[attr-defined]
            record = param.get_help_record(ctx)
            if record is None:
                continue
            names, text = record
            if getattr(param, "is_flag", False) and not getattr(param, "count", False):
                names = _VALUE.sub("", names)  # a flag takes no value: show none
            names = _LIST.sub(lambda match: f"<{match[1].lower()}>", names)  # repeatable: the help says so
            (arguments if param.param_type_name == "argument" else options).append((names, text))
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    write_dl(formatter, rows)


class HelpCommand(HelpText, TyperCommand):
    """Every command's class: its help as :class:`HelpText` lays it out."""


class HelpGroup(HelpText, TyperGroup):
    """Every group's class: its commands listed each with its whole summary."""

    def format_options(self, ctx: typer.Context, formatter) -> None:
        HelpText.format_options(self, ctx, formatter)  # click's group lists its commands after its options
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: typer.Context, formatter) -> None:
        rows = [
            (name, summary(command))
            for name in self.list_commands(ctx)
            if (command := self.get_command(ctx, name)) is not None and not command.hidden
        ]
        if rows:
            with formatter.section("Commands"):
                write_dl(formatter, rows)


class Typer(typer.Typer):
    """The CLI's Typer apps: plain help (no markdown renderer to load), laid out by HelpGroup and HelpCommand."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", HelpGroup)
        kwargs.setdefault("rich_markup_mode", None)
        super().__init__(**kwargs)

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        return super().command(name, cls=cls or HelpCommand, **kwargs)
