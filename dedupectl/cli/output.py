"""Rendering helpers shared by every command: rich tables for people, JSON for scripts, one-line errors."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

console = Console()
err_console = Console(stderr=True)


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return value


def print_json(value: Any) -> None:
    """Write ``value`` as one JSON document on stdout (dataclasses, paths and bytes made plain)."""
    sys.stdout.write(json.dumps(_jsonable(value), indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


GAP = 2  # spaces between columns
# a size's number and unit are one word: "871.4 KiB" never breaks between them
_UNIT_SPACE = re.compile(r"(?<=\d) (?=(?:B|KiB|MiB|GiB|TiB|PiB)\b)")
_WORD = re.compile(r"[^ ]+")


def _words(plain: str) -> list[tuple[int, int]]:
    """Where a cell may not break: its words, a number and its unit counted as one."""
    return [match.span() for match in _WORD.finditer(_UNIT_SPACE.sub("\0", plain))]


def _longest_word(plain: str) -> int:
    return max((cell_len(plain[start:end]) for start, end in _words(plain)), default=0)


def _wrap(cell: Text, width: int) -> Text:
    """The cell in lines of at most ``width`` columns, broken only between words (markup kept)."""
    lines: list[tuple[int, int]] = []
    for start, end in _words(cell.plain):
        if lines and cell_len(cell.plain[lines[-1][0] : end]) <= width:
            lines[-1] = (lines[-1][0], end)
        else:
            lines.append((start, end))
    return Text("\n").join(cell[start:end] for start, end in lines) if lines else cell


def print_table(
    title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], *, whole: Collection[str] = ()
) -> None:
    """A table for people on stdout, as wide as the console (the terminal; piped: COLUMNS, else 80).

    No cell or header ever breaks inside a word (a number, a size, an id): a row is one line when the table
    fits; else the columns of several words wrap between them, and the columns named in ``whole`` (ids,
    locations: what people copy or grep) not at all. A table that cannot fit even so is printed one record
    per row, a field a line (as psql's expanded display). A header wider than its column's values takes two
    lines instead of widening it. Untitled columns make a table without a header (a list of fields). Full
    values are in each command's ``--json``."""
    cells = [[Text.from_markup("" if cell is None else str(cell)) for cell in row] for row in rows]
    header_words = [_longest_word(column) for column in columns]
    natural = [max([header_words[index], *(row[index].cell_len for row in cells)]) for index in range(len(columns))]
    least = [
        natural[index]
        if column in whole
        else max([header_words[index], *(_longest_word(row[index].plain) for row in cells)])
        for index, column in enumerate(columns)
    ]
    room = console.width - GAP * (len(columns) - 1)
    if sum(least) > room:
        _print_records(title, columns, cells)
        return
    widths = list(natural)
    while sum(widths) > room:  # take a column from where it has most to spare above its longest word
        index = max(range(len(widths)), key=lambda at: widths[at] - least[at])
        widths[index] -= 1
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        show_header=any(columns),
        pad_edge=False,
        collapse_padding=True,
    )
    for column, width in zip(columns, widths, strict=True):
        table.add_column(_header(column, width), width=width, no_wrap=True, overflow="ignore")
    for row in cells:
        table.add_row(*(_wrap(cell, width) for cell, width in zip(row, widths, strict=True)))
    console.print(table)


def _print_records(title: str, columns: Sequence[str], cells: list[list[Text]]) -> None:
    """One block per row, ``column  value`` a line: for a table too wide for the console."""
    console.print(title, highlight=False, soft_wrap=False)
    label = max((cell_len(column) for column in columns), default=0)
    room = max(console.width - label - GAP, 1)
    for row in cells:
        console.print()
        for column, cell in zip(columns, row, strict=True):
            lines = _wrap(cell, room).split("\n")
            console.print(Text(f"{column:<{label}}{' ' * GAP}").append_text(lines[0]), soft_wrap=True)
            for line in lines[1:]:
                console.print(Text(" " * (label + GAP)).append_text(line), soft_wrap=True)


def _header(column: str, width: int) -> str:
    """The header on as many lines as it takes to be no wider than its column (or its longest word)."""
    width = max(width, _longest_word(column))
    return "\n".join(textwrap.wrap(column, width, break_long_words=False, break_on_hyphens=False)) if column else column


def print_error(message: str) -> None:
    # escape: messages quote config like "[kafka]", which rich would otherwise eat as markup
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def when(timestamp_ms: int | None) -> str:
    """A record timestamp to the minute, in UTC: ``2026-11-24 12:30Z`` (--json has the milliseconds)."""
    if timestamp_ms is None:
        return "-"
    return datetime.fromtimestamp(timestamp_ms / 1000, UTC).strftime("%Y-%m-%d %H:%MZ")
