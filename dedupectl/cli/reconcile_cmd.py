"""``dedupectl reconcile``: the dedup store against the output topic, and the repair."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from dedupectl.cli.common import (
    BootstrapOption,
    ConfigOption,
    JsonOption,
    KafkaSettingOption,
    parse_kafka_settings,
    setup_logging,
)
from dedupectl.cli.output import console, err_console, print_error, print_json, print_table
from dedupectl.config import resolve_worker_config
from dedupectl.errors import ConfigError
from reconcile.gaps import RUNBOOK as GAPS_RUNBOOK
from reconcile.gaps import describe as describe_gap
from reconcile.ranges import FORMS, parse_bound
from reconcile.report import NO_STORE, PartitionReport, ReconcileReport
from reconcile.runner import ReconcileRequest, run_reconcile


def reconcile(
    partition: list[int] | None = typer.Option(
        None, "--partition", "-p", help="Output partition to reconcile (repeatable)."
    ),
    all_partitions: bool = typer.Option(
        False, "--all", help="Every partition of the output topic; one without a store in --data-dir is reported."
    ),
    start: str | None = typer.Option(
        None, "--from", help=f"First offset or time, inclusive (default: the first retained): {FORMS}."
    ),
    stop: str | None = typer.Option(
        None, "--to", help="Last offset or time, exclusive (default: the end when reconcile starts)."
    ),
    apply: bool = typer.Option(
        False,
        "--apply",
        help="Repair the store: record ids it lacks, remove ids the output never published. "
        "Needs the partition's worker stopped.",
    ),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Partitions reconciled at once."),
    samples: int = typer.Option(10, "--samples", help="Ids shown per kind of difference."),
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    input_topic: str | None = typer.Option(None, "--input-topic", "-i", help="The worker's input (names stores)."),
    output_topic: str | None = typer.Option(None, "--output-topic", "-o", help="The topic to compare with."),
    data_dir: Path | None = typer.Option(None, "--data-dir", "-d", help="Where partition stores live."),
    kafka_setting: list[str] | None = KafkaSettingOption,
    log_level: str = typer.Option("warning", "--log-level", help="debug, info, warning or error."),
    json_output: bool = JsonOption,
) -> None:
    """Compare partition stores with the output topic; with --apply, repair them.

    Per partition: ids in the output the store lacks, ids in the store the output lacks,
    ids repeated in the output. Works while the worker runs; --apply needs it stopped.

    Exit 0: in sync (or repaired); 1: differences left; 2: error.

    Example: dedupectl reconcile -c dedupectl.toml --all --from 2h --jobs 2
    """
    setup_logging(log_level)
    if bool(partition) == all_partitions:
        raise ConfigError("give --partition P (repeatable) or --all", "for example: dedupectl reconcile -p 0 -c …")
    worker_config = resolve_worker_config(
        config,
        flags={
            "bootstrap_servers": bootstrap_servers,
            "input_topic": input_topic,
            "output_topic": output_topic,
            "data_dir": data_dir,
            "kafka": parse_kafka_settings(kafka_setting),
        },
    )
    if samples < 0:
        raise ConfigError(f"--samples must be 0 or more, got {samples}")
    request = ReconcileRequest(
        kafka=worker_config.kafka,
        input_topic=worker_config.input_topic,
        output_topic=worker_config.output_topic,
        data_dir=worker_config.data_dir,
        partitions=None if all_partitions else tuple(partition),
        start=None if start is None else parse_bound(start, "--from"),
        stop=None if stop is None else parse_bound(stop, "--to"),
        apply=apply,
        jobs=jobs,
        sample_size=samples,
    )
    try:
        with _ProgressBars() as bars:
            report = run_reconcile(request, progress=bars)
    except KeyboardInterrupt:
        print_error("interrupted: each batch was written whole, so the stores are consistent; run again to finish")
        raise typer.Exit(130) from None
    if json_output:
        print_json({"exit_code": report.exit_code, "records_scanned": report.records_scanned, **_as_dict(report)})
    else:
        _render(report)
    raise typer.Exit(report.exit_code)


class _ProgressBars:
    """One bar per partition on stderr (records, rate, ETA); silent when stderr is not a terminal."""

    def __init__(self) -> None:
        self._progress = Progress(
            TextColumn("partition {task.fields[partition]}"),
            BarColumn(),
            TextColumn("{task.fields[records]:>12,} records"),
            TextColumn("{task.fields[rate]:>10,.0f}/s"),
            TimeRemainingColumn(),
            console=err_console,
            disable=not err_console.is_terminal,
        )
        self._tasks: dict[int, tuple[TaskID, int, float]] = {}

    def __enter__(self) -> _ProgressBars:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def started(self, partition: int, offsets) -> None:
        task = self._progress.add_task(
            "", total=max(offsets.stop - offsets.start, 1), partition=partition, records=0, rate=0.0
        )
        self._tasks[partition] = (task, offsets.start, time.monotonic())

    def advanced(self, partition: int, position: int, records: int) -> None:
        task, start, began = self._tasks[partition]
        rate = records / max(time.monotonic() - began, 1e-6)
        self._progress.update(task, completed=position - start, records=records, rate=rate)

    def finished(self, partition: int, report: PartitionReport) -> None:
        task, _, _ = self._tasks[partition]
        total = self._progress.tasks[task].total
        self._progress.update(task, completed=total, records=report.records_scanned)


def _as_dict(report: ReconcileReport) -> dict:
    return {
        "output_topic": report.output_topic,
        "input_topic": report.input_topic,
        "applied": report.applied,
        "seconds": report.seconds,
        "partitions": list(report.partitions),
        "partitions_without_store": list(report.without_store),
    }


def _render(report: ReconcileReport) -> None:
    rows = []
    for p in report.partitions:
        before, after = p.coverage_before.output_offset, p.coverage_after.output_offset
        rows.append(
            (
                p.partition,
                f"{p.start_offset}-{p.end_offset}",
                f"{p.records_scanned:,}",
                _with_action(p.missing_from_store, p.recorded, "recorded"),
                _with_action(p.unpublished, p.removed, "removed"),
                _duplicates(p),
                f"{before}" if before == after else f"{before} → {after}",
                p.status,
            )
        )
    rows += [(p, "", "", "", "", "", "", NO_STORE) for p in report.without_store]
    rows.sort(key=lambda row: row[0])
    print_table(
        f"reconcile {report.output_topic} (store: {report.input_topic}){' --apply' if report.applied else ''}",
        [
            "partition",
            "offsets",
            "records",
            "missing from store",
            "missing from output",
            "duplicates",
            "covered output offset",
            "status",
        ],
        rows,
    )
    sample_rows = []
    for p in report.partitions:
        sample_rows += [
            (p.partition, "missing from store", s.id, f"offset {s.offset}") for s in p.samples.missing_from_store
        ]
        sample_rows += [(p.partition, "missing from output", s.id, f"seq {s.seq}") for s in p.samples.unpublished]
        sample_rows += [
            (p.partition, "duplicate", s.id, "repeated at " + ", ".join(map(str, s.repeat_offsets)))
            for s in p.samples.duplicates
        ]
    if sample_rows:
        print_table("samples", ["partition", "kind", "id", "where"], sample_rows)
    for p in report.partitions:
        notes = [
            (p.older_than_window, "ids older than the store's window (aged out, as designed)"),
            (p.unkeyed_records, "records without a key (not written by the worker)"),
            (p.published_outside_range, "ids kept in the store: the output holds them outside the range"),
            (
                p.put_back,
                "ids the store had lost inside its window: put back under their own sequence numbers"
                if p.applied
                else "ids the store lost inside its window: --apply puts them back in their place",
            ),
            (
                p.unplaceable,
                "ids missing inside the store's recorded stretch with no place in its aging order "
                "(not recorded): rebuild the store from the output, see docs/runbooks/rebuild-lost-store.md",
            ),
        ]
        for count, what in notes:
            if count:
                console.print(f"partition {p.partition}: {count:,} {what}")
        if p.removal_skipped:
            console.print(f"partition {p.partition}: nothing removed: {p.removal_skipped}")
    _print_output_gaps(report)
    for partition in report.without_store:
        console.print(
            f"partition {partition}: no store in {report.data_dir}: the worker that takes the partition rebuilds "
            "it from the output (its recovery logs how far back it reads); if the output no longer holds the "
            "whole window, see docs/runbooks/rebuild-lost-store.md"
        )
    rate = report.records_scanned / report.seconds if report.seconds else 0.0
    console.print(f"{report.records_scanned:,} records in {report.seconds:.1f}s ({rate:,.0f}/s)")
    repairable = any(p.missing_from_store or p.unpublished for p in report.partitions)
    if report.exit_code and repairable and not report.applied:
        console.print("to repair: stop the partition's worker, then run the same command with --apply")


def _print_output_gaps(report: ReconcileReport) -> None:
    for p in report.partitions:
        if p.output_gap is not None:
            console.print(
                f"partition {p.partition}: output gap: {describe_gap(p.output_gap, report.output_topic, p.partition)}"
                f": the worker refuses this partition; restore a newer snapshot, rebuild the store, or accept the "
                f"gap (dedupectl accept-gap): see {GAPS_RUNBOOK}",
                soft_wrap=True,
            )


def _duplicates(p: PartitionReport) -> str:
    if not p.duplicate_records:
        return "0"
    return f"{p.duplicate_records:,} ({p.duplicate_ids:,} id{'s' if p.duplicate_ids != 1 else ''})"


def _with_action(found: int, done: int, verb: str) -> str:
    return f"{found:,} ({done:,} {verb})" if done else f"{found:,}"


def register(app: typer.Typer) -> None:
    app.command("reconcile")(reconcile)
