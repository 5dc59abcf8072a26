"""Rendering helpers shared by every command: rich tables for people, JSON for scripts, one-line errors."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
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
SHORTEST_FOLD = 4  # a folding column keeps at least this many characters before the table is printed wider


def print_table(
    title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], *, whole: Collection[str] = ()
) -> None:
    """A table for people on stdout, as wide as the console (the terminal; piped: COLUMNS, else 80).

    The columns named in ``whole`` (ids, locations: what people copy or grep) never wrap: the other columns
    fold when the table must shrink; a console too narrow for them gets the table at its natural width. A
    header wider than its column's values takes two lines instead of widening it. Untitled columns make a
    table without a header (a list of fields). Full values are in each command's ``--json``."""
    cells = [["" if cell is None else str(cell) for cell in row] for row in rows]
    widest = [max((Text.from_markup(row[index]).cell_len for row in cells), default=0) for index in range(len(columns))]
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        show_header=any(columns),
        pad_edge=False,
        collapse_padding=True,
    )
    for column, width in zip(columns, widest, strict=True):
        keep = column in whole
        table.add_column(_header(column, width), overflow="fold", no_wrap=keep, min_width=width if keep else None)
    for row in cells:
        table.add_row(*row)
    needed = sum(width if column in whole else SHORTEST_FOLD for column, width in zip(columns, widest, strict=True))
    if needed + GAP * (len(columns) - 1) <= console.width:
        console.print(table)
    else:  # wider than the console anyway: at its natural width, one line per row
        natural = Measurement.get(console, console.options.update(width=10_000), table).maximum
        Console(file=console.file, width=natural).print(table)


def _header(column: str, widest_value: int) -> str:
    """The header on as many lines as it takes to be no wider than its values (or its longest word)."""
    width = max(widest_value, *(cell_len(word) for word in column.split() or [""]))
    return "\n".join(textwrap.wrap(column, width, break_long_words=False)) if column else column


def print_error(message: str) -> None:
    # escape: messages quote config like "[kafka]", which rich would otherwise eat as markup
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
