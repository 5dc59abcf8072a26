"""Store operations: ``age``, ``window``, ``stats``, ``sst``, ``compactions``, ``lookup``, ``compact``
(``accept-gap`` is in ``dedupectl.cli.commands.gaps``).

Every command works on the partition stores under ``--data-dir`` (all partitions, or those given with
``--partition``); the reading ones never take the worker's lock.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from dedupectl.cli.commands.gaps import print_gaps
from dedupectl.cli.options import (
    DataDirOption,
    JsonOption,
    MaxBytesOption,
    MaxKeysOption,
    PartitionsOption,
    StoreTopicOption,
    given_once,
)
from dedupectl.cli.output import console, err_console, print_json, print_table, when
from dedupectl.cli.progress import status_line
from dedupectl.errors import ConfigError
from store.codec import COLUMN_FAMILIES
from store.selection import StoreRef, partitions_without_store, select_stores
from store.sizes import format_age, format_duration, format_size, parse_duration, parse_size

if TYPE_CHECKING:
    from store.compaction_log import Job
    from store.inspect_stats import StoreStats
    from store.window import WindowInfo

# The store's modules that open RocksDB (rocksdict, numpy) are imported by the command that runs, not by --help.


def _refs(data_dir: Path, topic: str | None, partitions: list[int] | None) -> list[StoreRef]:
    return select_stores(data_dir, topic, partitions)


def _age_seconds(timestamp_ms: int | None) -> float | None:
    return None if timestamp_ms is None else time.time() - timestamp_ms / 1000


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


# -- age -------------------------------------------------------------------------------------------------


def age(
    data_dir: Path = DataDirOption,
    topic: str | None = StoreTopicOption,
    partition: list[int] | None = PartitionsOption,
    max_keys: int | None = MaxKeysOption,
    max_bytes: str | None = MaxBytesOption,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Only say how many ids would go and the window left (works while the worker runs)."
    ),
    json_output: bool = JsonOption,
) -> None:
    """Age a stopped store: drop its oldest ids until it holds at most --max-keys ids and/or --max-bytes.

    The worker ages its stores itself between batches; this is for a stopped store, or with --dry-run to see
    what a bound would give: "window after" is what aging now leaves, "window at bound" the window the store
    keeps once full at this bound, at its present ids per hour (answers for a larger bound too).

    Example: dedupectl age -d /var/lib/dedupectl --max-bytes 40GiB --dry-run
    """
    from store.aging import AgingPolicy
    from store.operations import age_stores

    policy = AgingPolicy(
        max_keys=max_keys, max_bytes=None if max_bytes is None else parse_size(max_bytes, what="--max-bytes")
    )
    if not policy.bounded:
        raise ConfigError("no bound given", "pass --max-keys and/or --max-bytes")
    refs = _refs(data_dir, topic, partition)
    with status_line("aging") as step:
        outcomes = age_stores(
            refs, policy, dry_run=dry_run, on_store=lambda ref: step(f"aging partition {ref.partition}")
        )
    if json_output:
        print_json(outcomes)
        return
    print_table(
        "what aging would do (dry run)" if dry_run else "aged",
        [
            "partition",
            "bound",
            "ids before",
            "ids aged",
            "ids after",
            "bytes",
            "freed",
            "window before",
            "window after",
            "ids/h",
            "window at bound",
        ],
        [
            (
                o.partition,
                o.reason,
                _count(o.live_ids_before),
                _count(o.ids_aged),
                _count(o.live_ids_after),
                format_size(o.bytes_before),
                format_size(o.bytes_freed),
                format_duration(o.window_seconds_before),
                format_duration(o.window_seconds_after),
                _count(None if o.ids_per_hour is None else round(o.ids_per_hour)),
                format_duration(o.window_seconds_at_bound),
            )
            for o in outcomes
        ],
    )


# -- window ----------------------------------------------------------------------------------------------


def _window_json(info: WindowInfo, floor: float | None) -> dict:
    record = asdict(info)
    record["path"] = str(info.path)
    record["bytes_per_id"] = info.bytes_per_id
    record["ids_per_hour"] = info.ids_per_hour
    if floor is not None:
        record["below_min"] = info.below(floor)
    return record


def window(
    data_dir: Path = DataDirOption,
    topic: str | None = StoreTopicOption,
    partition: list[int] | None = PartitionsOption,
    minimum: str | None = typer.Option(
        None, "--min", help="Exit 1 when any partition's window is shorter than this, e.g. 24h (for alerting)."
    ),
    partition_count: int | None = typer.Option(
        None,
        "--partition-count",
        min=1,
        help="The topic's partition count: a partition below it with no store here is reported (exit 1).",
    ),
    partitions: int | None = typer.Option(None, "--partitions", min=1, hidden=True),  # its shipped spelling
    json_output: bool = JsonOption,
) -> None:
    """The effective window per partition: the age of its oldest live id, with ids, ids per hour, bytes and
    sequence range.

    Example: dedupectl window -d /var/lib/dedupectl --min 24h --partition-count 16
    """
    from store.window import read_windows

    partition_count = given_once(partition_count, partitions, "--partition-count", "--partitions")
    floor = None if minimum is None else parse_duration(minimum, what="--min")
    refs = _refs(data_dir, topic, partition)
    infos = read_windows(refs)
    below = [info for info in infos if floor is not None and info.below(floor)]
    missing = [] if partition_count is None or partition else partitions_without_store(refs, partition_count)
    if json_output:
        records = [{**_window_json(info, floor), "no_store": False} for info in infos]
        records += [{"topic": refs[0].topic, "partition": p, "no_store": True} for p in missing]
        print_json(sorted(records, key=lambda record: record["partition"]))
    else:
        # the oldest id's age is the window, the newest seq the oldest's plus the ids: --json has all four
        columns = ["partition", "ids", "ids/h", "on disk", "B/id", "oldest seq", "newest", "window"]
        if floor is not None:
            columns.append(f"≥ {format_duration(floor)}")
        rows = []
        for info in infos:
            row = [
                info.partition,
                _count(info.live_ids),
                _count(None if info.ids_per_hour is None else round(info.ids_per_hour)),
                format_size(info.disk_bytes),
                _number(info.bytes_per_id),
                _count(info.oldest_seq),
                format_age(_age_seconds(info.newest_ts_ms)),
                format_duration(info.window_seconds) if info.window_seconds is not None else "empty",
            ]
            if floor is not None:
                row.append("[red]BELOW[/]" if info.below(floor) else "ok")
            rows.append(row)
        rows += [[p, *["-"] * (len(columns) - 2), "[red]no store[/]"] for p in missing]
        rows.sort(key=lambda row: row[0])
        print_table(f"effective window ({infos[0].topic})" if infos else "effective window", columns, rows)
        for p in missing:
            err_console.print(
                f"partition {p}: no store in {data_dir}: the worker that takes it rebuilds it from the output; "
                "if the output no longer holds the whole window, see docs/runbooks/rebuild-lost-store.md",
                highlight=False,
            )
        if below:
            err_console.print(
                f"{len(below)} partition(s) below {format_duration(floor)}: see docs/runbooks/"
                "effective-window-below-24h.md",
                highlight=False,
            )
        print_gaps(infos, data_dir)
    if below or missing or any(info.refused_gap is not None for info in infos):
        raise typer.Exit(1)


# -- stats -----------------------------------------------------------------------------------------------


# RocksDB's own headers, with a space where a narrow column may break them
_STATS_COLUMNS = ["Level", "Files", "Size", "Score", "Read (GB)", "Write (GB)", "W-Amp", "Comp (sec)"]
_STATS_COLUMNS += ["Comp (cnt)", "KeyIn", "KeyDrop"]


def _print_stats(stats: StoreStats) -> None:
    dumped = f"I/O columns from the worker's statistics of {stats.dumped_at}" if stats.dumped_at else "no dump yet"
    for family in stats.families:
        print_table(
            escape(f"** Compaction Stats [{family.family}] ** {stats.topic}[{stats.partition}] ({dumped})"),
            _STATS_COLUMNS,
            [
                (
                    level.level,
                    level.files,
                    format_size(level.size_bytes),
                    _number(level.score, 2),
                    _number(level.read_gb),
                    _number(level.write_gb),
                    _number(level.write_amp),
                    _number(level.comp_seconds, 2),
                    _count(level.comp_count),
                    _count(level.keys_in),
                    _count(level.keys_dropped),
                )
                for level in family.levels
            ],
        )
    bloom = stats.bloom
    print_table(
        escape(f"{stats.topic}[{stats.partition}]: {stats.live_ids:,} live ids"),
        ["family", "estimated keys", "live data", "SST files", "memtables", "pending compaction"],
        [
            (
                family.family,
                _count(family.estimated_keys),
                format_size(family.live_data_bytes),
                format_size(family.sst_bytes),
                format_size(family.memtable_bytes),
                format_size(family.pending_compaction_bytes),
            )
            for family in stats.families
        ],
    )
    arrays = stats.arrays
    if arrays.files:
        console.print(
            f"sealed arrays: {arrays.ids:,} ids of sealed generations in {arrays.files} files, "
            f"{format_size(arrays.bytes)} (not in the ids family's keys and bytes above)"
        )
    if bloom is not None and bloom.checked:
        console.print(
            f"bloom filters: {bloom.useful_ratio:.1%} of {bloom.checked:,} file probes skipped a read; "
            f"false positives {_number(100 * (bloom.false_positive_rate or 0.0), 2)}%",
            highlight=False,
        )
    else:
        console.print("bloom filters: no statistics yet (the worker dumps them every few minutes)", highlight=False)


def stats(
    data_dir: Path = DataDirOption,
    topic: str | None = StoreTopicOption,
    partition: list[int] | None = PartitionsOption,
    json_output: bool = JsonOption,
) -> None:
    """RocksDB's per-level compaction table per column family, estimated keys, sizes and bloom-filter usefulness.

    Example: dedupectl stats -d /var/lib/dedupectl -p 0
    """
    from store.inspect_stats import store_stats

    results = [store_stats(ref) for ref in _refs(data_dir, topic, partition)]
    if json_output:
        print_json(
            [
                {
                    **asdict(result),
                    "bloom": None
                    if result.bloom is None
                    else {
                        **asdict(result.bloom),
                        "checked": result.bloom.checked,
                        "useful_ratio": result.bloom.useful_ratio,
                        "false_positive_rate": result.bloom.false_positive_rate,
                    },
                }
                for result in results
            ]
        )
        return
    for result in results:
        _print_stats(result)


# -- sst -------------------------------------------------------------------------------------------------

_FAMILY_NAMES = ", ".join(COLUMN_FAMILIES[:-1]) + f" or {COLUMN_FAMILIES[-1]}"  # the store's families, as words


def sst(
    data_dir: Path = DataDirOption,
    topic: str | None = StoreTopicOption,
    partition: list[int] | None = PartitionsOption,
    family: list[str] | None = typer.Option(None, "--family", "-f", help=f"{_FAMILY_NAMES} (repeatable)."),
    json_output: bool = JsonOption,
) -> None:
    """The live SST files: family, level, size, smallest and largest key, entries and deletions (tombstones).

    The ids files are those of every generation; first and last seq are the generation's sequence range.

    Example: dedupectl sst -d /var/lib/dedupectl -p 3 -f ids
    """
    from store.operations import list_sst

    for name in family or []:
        if name not in COLUMN_FAMILIES:
            raise ConfigError(f"unknown family {name!r}", f"use {_FAMILY_NAMES}")
    rows = list_sst(_refs(data_dir, topic, partition), family)
    if json_output:
        print_json(rows)
        return
    print_table(
        "live SST files",
        ["partition", "family", "level", "file", "size", "smallest", "largest", "entries", "deletions"],
        [
            (
                row.partition,
                row.family,
                f"L{row.level}",
                row.file,
                format_size(row.size),
                row.smallest,
                row.largest,
                _count(row.entries),
                _count(row.deletions),
            )
            for row in rows
        ],
        whole=("file",),
    )


# -- compactions -----------------------------------------------------------------------------------------


def _job_row(partition: int, job: Job) -> tuple:
    inputs = " + ".join(f"{count}@{level}" for level, count in job.inputs.items()) or "memtable"
    output = "-" if job.output_files is None else f"{job.output_files}@L{job.output_level}"
    stamp = job.started or job.finished or "-"
    return (
        partition,
        f"{stamp[5:10].replace('/', '-')} {stamp[11:19]}" if len(stamp) >= 19 else stamp,  # the LOG's local time
        job.job if job.job is not None else "-",
        f"{job.kind} {job.family or ''}".strip(),
        job.reason or "-",
        inputs,
        output,
        f"{format_size(job.bytes_in)} → {format_size(job.bytes_out)}",
        _count(job.keys_in),
        _count(job.keys_dropped),
        _number(job.seconds, 2) if job.done else "running",
    )


_JOB_COLUMNS = ["partition", "started", "job", "what", "reason", "inputs", "output", "bytes"]
_JOB_COLUMNS += ["keys in", "dropped", "seconds"]


def compactions(
    data_dir: Path = DataDirOption,
    topic: str | None = StoreTopicOption,
    partition: list[int] | None = PartitionsOption,
    last: int = typer.Option(20, "--last", "-n", help="How many recent jobs per partition."),
    family: list[str] | None = typer.Option(None, "--family", "-f", help=f"{_FAMILY_NAMES} (repeatable)."),
    kind: list[str] | None = typer.Option(
        None, "--kind", "-k", help="flush, compaction or deletion (aging's file drops) (repeatable)."
    ),
    follow: bool = typer.Option(False, "--follow", help="Keep watching and print each job as it finishes."),
    follow_seconds: float | None = typer.Option(
        None, "--follow-seconds", help="With --follow: stop after this many seconds."
    ),
    json_output: bool = JsonOption,
) -> None:
    """Recent flush and compaction jobs from each store's LOG: reason, inputs per level, output, bytes, keys.

    Example: dedupectl compactions -d /var/lib/dedupectl -p 0 -f ids -k flush --follow
    """
    from store.compaction_log import JobFilter, follow_jobs, read_jobs

    if last <= 0:
        raise ConfigError(f"--last must be positive, got {last}")
    only = JobFilter(families=frozenset(family or ()), kinds=frozenset(kind or ()))
    refs = _refs(data_dir, topic, partition)
    recent = [(ref.partition, job) for ref in refs for job in read_jobs(ref.path, last=last, only=only)]
    if json_output and not follow:
        print_json([{"partition": p, **asdict(job), "keys_dropped": job.keys_dropped} for p, job in recent])
        return
    if not json_output:
        print_table("recent flushes and compactions", _JOB_COLUMNS, [_job_row(p, job) for p, job in recent])
    if not follow:
        return
    deadline = None if follow_seconds is None else time.monotonic() + follow_seconds
    err_console.print("following (Ctrl-C to stop)", highlight=False)
    try:
        for index, job in follow_jobs(
            [ref.path for ref in refs],
            stop=lambda: deadline is not None and time.monotonic() >= deadline,
            only=only,
        ):
            if json_output:
                print_json({"partition": refs[index].partition, **asdict(job), "keys_dropped": job.keys_dropped})
            else:
                console.print(" | ".join(str(cell) for cell in _job_row(refs[index].partition, job)), highlight=False)
    except KeyboardInterrupt:
        return


# -- lookup ----------------------------------------------------------------------------------------------


def lookup(
    ids: list[str] = typer.Argument(..., help="Message ids to look up.", metavar="ID"),
    data_dir: Path = DataDirOption,
    topic: str | None = StoreTopicOption,
    partition: list[int] | None = PartitionsOption,
    json_output: bool = JsonOption,
) -> None:
    """Is this id in the window? Its partition, sequence number and record timestamp (and age, with --json).

    Example: dedupectl lookup -d /var/lib/dedupectl ajs-8f3c2e1d0b9a47c6a5d4e3f2a1b0c9d8
    """
    from store.operations import lookup_ids

    results = lookup_ids(_refs(data_dir, topic, partition), ids)
    if json_output:
        print_json(results)
        return
    print_table(
        "lookup",
        ["id", "partition", "in window", "seq", "timestamp"],  # the age is in --json
        [
            (
                r.id,
                "-" if r.partition is None else r.partition,
                "yes" if r.in_window else "no",
                _count(r.seq),
                when(r.timestamp_ms),
            )
            for r in results
        ],
        whole=("id",),
    )


# -- compact ---------------------------------------------------------------------------------------------


def compact(
    data_dir: Path = DataDirOption,
    topic: str | None = StoreTopicOption,
    partition: list[int] | None = PartitionsOption,
    json_output: bool = JsonOption,
) -> None:
    """Compact a stopped store: drop aged-out generations, compact each other one into its run, clear the
    tombstones aging left.

    Refuses while a worker holds the store.

    Example: dedupectl compact -d /var/lib/dedupectl -p 0
    """
    from store.operations import compact_stores

    refs = _refs(data_dir, topic, partition)
    with status_line("compacting") as step:
        outcomes = compact_stores(refs, on_store=lambda ref: step(f"compacting partition {ref.partition}"))
    if json_output:
        print_json(outcomes)
        return
    print_table(
        "compacted",
        ["partition", "files", "tombstones", "bytes on disk", "aged-out generations dropped", "seconds"],
        [
            (
                o.partition,
                f"{o.files_before} → {o.files_after}",
                f"{o.tombstones_before:,} → {o.tombstones_after:,}",
                f"{format_size(o.bytes_before)} → {format_size(o.bytes_after)}",
                o.dead_generations_dropped,
                _number(o.seconds, 2),
            )
            for o in outcomes
        ],
    )


COMMANDS: Sequence = (age, window, stats, sst, compactions, lookup, compact)


def register(app: typer.Typer) -> None:
    for command in COMMANDS:
        app.command(command.__name__.replace("_", "-"))(command)
