"""Reading a store's RocksDB info LOG (and its rotations ``LOG.old.<micros>``) without touching the database.

The worker's RocksDB writes its flush and compaction events and, every few minutes, its statistics there:
it is the only place a second process can learn the cumulative compaction I/O and bloom-filter counters of
a live store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_TIMESTAMP = re.compile(r"^(\d{4}/\d{2}/\d{2}-\d{2}:\d{2}:\d{2}\.\d+)")
_ORIGINAL_TIME = re.compile(r"\(Original Log Time (\d{4}/\d{2}/\d{2}-\d{2}:\d{2}:\d{2}\.\d+)\)")
_SOURCE = re.compile(r"^\[[\w/.-]+\.(?:cc|h):\d+\] ?")  # "[db/flush_job.cc:901] "
_DUMP_START = "------- DUMPING STATS -------"
_CF_HEADER = re.compile(r"^\*\* Compaction Stats \[(?P<cf>[^\]]+)\] \*\*")
_STAT_LINE = re.compile(r"^\s*(rocksdb\.[\w.]+) COUNT : (\d+)")
_NUMBER_SUFFIX = {"": 1, "K": 1_000, "M": 1_000_000, "G": 1_000_000_000}
_SIZE_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
_STRANGERS_BEFORE_END = 20


@dataclass(frozen=True)
class LogLine:
    file: str
    time: str  # RocksDB's local timestamp, as written
    text: str  # the line without its timestamp and thread prefix


def log_files(store_dir: Path) -> list[Path]:
    """The store's info logs, oldest first."""
    store_dir = Path(store_dir)
    rotated = sorted(store_dir.glob("LOG.old.*"), key=lambda path: int(path.suffix.lstrip(".") or 0))
    current = store_dir / "LOG"
    return [*rotated, current] if current.exists() else rotated


def read_lines(path: Path, start: int = 0) -> tuple[list[LogLine], int]:
    """Lines of one LOG from byte ``start``; returns them and the offset after the last complete line."""
    try:
        with open(path, "rb") as handle:
            handle.seek(start)
            data = handle.read()
    except FileNotFoundError:
        return [], start
    end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
    lines = []
    for raw in data[:end].decode("utf-8", "replace").splitlines():
        lines.append(_parse(path.name, raw))
    return lines, start + end


def _parse(file: str, raw: str) -> LogLine:
    original = _ORIGINAL_TIME.search(raw)
    stamp = _TIMESTAMP.match(raw)
    if stamp is None:
        return LogLine(file, "", raw)
    rest = raw[stamp.end() :].lstrip()
    rest = rest.split(" ", 1)[1] if " " in rest and rest.split(" ", 1)[0].isdigit() else rest  # thread id
    if original is not None:
        rest = rest.replace(original.group(0), "", 1).lstrip()
    rest = _SOURCE.sub("", rest, count=1)
    return LogLine(file, original.group(1) if original else stamp.group(1), rest)


def parse_count(text: str) -> int:
    """RocksDB's abbreviated counts: ``12M``, ``3378K``, ``40``."""
    match = re.fullmatch(r"(-?\d+(?:\.\d+)?)([KMG]?)", text.strip())
    if not match:
        raise ValueError(text)
    return int(float(match[1]) * _NUMBER_SUFFIX[match[2]])


def parse_size(number: str, unit: str) -> int:
    return int(float(number) * _SIZE_UNITS.get(unit.upper(), 1))


@dataclass(frozen=True)
class StatsDump:
    """The last ``DUMPING STATS`` block: per-family compaction tables and the statistics counters."""

    time: str
    file: str
    tables: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # family -> rows of column: value
    counters: dict[str, int] = field(default_factory=dict)


def last_stats_dump(store_dir: Path) -> StatsDump | None:
    """The most recent complete statistics dump of the store's writer, if its LOG still holds one. The writer
    logs a dump's counters as a second message after its tables: a dump read between the two is passed over
    for the one before it, which has them, when there is one."""
    newest: StatsDump | None = None
    for path in reversed(log_files(store_dir)):
        lines, _ = read_lines(path)
        for start in reversed([index for index, line in enumerate(lines) if _DUMP_START in line.text]):
            dump = _parse_dump(lines, start)
            if dump.counters or newest is not None:  # with statistics off no dump has counters
                return dump if dump.counters else newest
            newest = dump
    return newest


def _parse_dump(lines: list[LogLine], start: int) -> StatsDump:
    # The dump is one multi-line message (continuation lines carry no timestamp), then, with statistics on,
    # a "STATISTICS:" message of counters. Other threads' lines may fall between the two.
    dump = StatsDump(time=lines[start].time, file=lines[start].file)
    family: str | None = None
    header: list[str] | None = None
    seen_body = in_counters = False
    strangers = 0
    for line in lines[start + 1 :]:
        text = line.text
        if line.time:
            if "STATISTICS:" in text:
                in_counters = True
                text = text.split("STATISTICS:", 1)[1]
            elif in_counters:
                break
            else:
                strangers += seen_body
                if strangers > _STRANGERS_BEFORE_END:  # no statistics block: the dump was only the tables
                    break
                continue
        seen_body = True
        stat = _STAT_LINE.match(text)
        if in_counters:
            if stat:
                dump.counters[stat.group(1)] = int(stat.group(2))
            continue
        stripped = text.strip()
        header_match = _CF_HEADER.match(stripped)
        if header_match:
            family, header = header_match.group("cf"), None
        elif family is not None and header is None and stripped.startswith("Level"):
            header = _columns(stripped)
        elif family is not None and header is not None and re.match(r"^(L\d+|Sum)\s", stripped):
            dump.tables.setdefault(family, []).append(_row(header, stripped))
        elif not stripped:
            family, header = None, None
    return dump


def _columns(header: str) -> list[str]:
    # Old RocksDB writes "Size(MB}" with a brace; normalise the names the reader looks up.
    return [name.replace("}", ")") for name in header.split()]


def _row(columns: list[str], text: str) -> dict[str, str]:
    tokens = text.split()
    row: dict[str, str] = {}
    position = 0
    for column in columns:
        if position >= len(tokens):
            break
        if column == "Size" and position + 1 < len(tokens) and tokens[position + 1] in _SIZE_UNITS:
            row[column] = f"{tokens[position]} {tokens[position + 1]}"
            position += 2
            continue
        row[column] = tokens[position]
        position += 1
    return row
