"""``dedupectl reconcile``: the dedup store against the output topic, and the repair."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dedupectl.cli.logs import setup_logging
from dedupectl.cli.options import (
    BootstrapOption,
    ConfigDataDirOption,
    ConfigOption,
    InputTopicAliasOption,
    InputTopicOption,
    JsonOption,
    KafkaSettingOption,
    LogLevelOption,
    OutputTopicOption,
    given_once,
    parse_kafka_settings,
)
from dedupectl.cli.output import console, print_error, print_json, print_table
from dedupectl.cli.progress import PartitionBars, ProgressDisplay
from dedupectl.config import resolve_worker_config
from dedupectl.errors import ConfigError
from reconcile.ranges import FORMS, parse_bound

if TYPE_CHECKING:
    from reconcile.report import PartitionReport, ReconcileReport

# reconcile.runner and reconcile.gaps load Kafka and RocksDB, reconcile.report the store's codec: imported
# when the command runs, not for --help


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
    topic: str | None = InputTopicOption,
    input_topic: str | None = InputTopicAliasOption,
    output_topic: str | None = OutputTopicOption,
    data_dir: Path | None = ConfigDataDirOption,
    kafka_setting: list[str] | None = KafkaSettingOption,
    log_level: str = LogLevelOption,
    json_output: bool = JsonOption,
) -> None:
    """Compare partition stores with the output topic; with --apply, repair them.

    Per partition: ids in the output the store lacks, ids in the store the output lacks,
    ids repeated in the output. Works while the worker runs; --apply needs it stopped.

    Exit 0: in sync (or repaired); 1: differences left; 2: error.

    Example: dedupectl reconcile -c /etc/dedupectl/dedupectl.toml --all --from 2h --jobs 2
    """
    from reconcile.runner import ReconcileRequest, run_reconcile

    setup_logging(log_level)
    if bool(partition) == all_partitions:
        raise ConfigError(
            "give --partition P (repeatable) or --all",
            "with the worker's settings, e.g. dedupectl reconcile --all -t events -o events-deduped -d data",
        )
    worker_config = resolve_worker_config(
        config,
        flags={
            "bootstrap_servers": bootstrap_servers,
            "input_topic": given_once(topic, input_topic, "--topic", "--input-topic"),
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
        with ProgressDisplay(transient=False) as display:
            report = run_reconcile(request, progress=PartitionBars(display))
    except KeyboardInterrupt:
        print_error("interrupted: each batch was written whole, so the stores are consistent; run again to finish")
        raise typer.Exit(130) from None
    if json_output:
        print_json({"exit_code": report.exit_code, "records_scanned": report.records_scanned, **_as_dict(report)})
    else:
        _render(report)
    raise typer.Exit(report.exit_code)


def _as_dict(report: ReconcileReport) -> dict:
    return {
        "output_topic": report.output_topic,
        "input_topic": report.input_topic,
        "applied": report.applied,
        "seconds": report.seconds,
        "partitions": list(report.partitions),
        "partitions_without_store": list(report.without_store),
    }


_COLUMNS = ["partition", "offsets", "records", "missing from store", "missing from output", "duplicates"]
_COLUMNS += ["covered output offset", "status"]


def _render(report: ReconcileReport) -> None:
    """The report for people: a row per partition, sample ids, what else was found, the totals."""
    applied = " --apply" if report.applied else ""
    title = f"reconcile {report.output_topic} (store: {report.input_topic}){applied}"
    print_table(title, _COLUMNS, _partition_rows(report))
    samples = [row for p in report.partitions for row in _sample_rows(p)]
    if samples:
        print_table("samples", ["partition", "kind", "id", "where"], samples, whole=("id",))
    for p in report.partitions:
        for line in _notes(p):
            console.print(f"partition {p.partition}: {line}")
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


def _partition_rows(report: ReconcileReport) -> list[tuple]:
    from reconcile.report import NO_STORE

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
    return sorted(rows, key=lambda row: row[0])


def _sample_rows(p: PartitionReport) -> list[tuple]:
    samples = p.samples
    rows = [(p.partition, "missing from store", s.id, f"offset {s.offset}") for s in samples.missing_from_store]
    rows += [(p.partition, "missing from output", s.id, f"seq {s.seq}") for s in samples.unpublished]
    rows += [
        (p.partition, "duplicate", s.id, "repeated at " + ", ".join(map(str, s.repeat_offsets)))
        for s in samples.duplicates
    ]
    return rows


def _notes(p: PartitionReport) -> list[str]:
    """What else reconcile found in a partition, a line each."""
    put_back = (
        "ids the store had lost inside its window: put back under their own sequence numbers"
        if p.applied
        else "ids the store lost inside its window: --apply puts them back in their place"
    )
    counted = [
        (p.older_than_window, "ids older than the store's window (aged out, as designed)"),
        (p.unkeyed_records, "records without a key (not written by the worker)"),
        (p.published_outside_range, "ids kept in the store: the output holds them outside the range"),
        (p.put_back, put_back),
        (
            p.unplaceable,
            "ids missing inside the store's recorded stretch with no place in its aging order "
            "(not recorded): rebuild the store from the output, see docs/runbooks/rebuild-lost-store.md",
        ),
    ]
    lines = [f"{count:,} {what}" for count, what in counted if count]
    if p.removal_skipped:
        lines.append(f"nothing removed: {p.removal_skipped}")
    return lines


def _print_output_gaps(report: ReconcileReport) -> None:
    from reconcile.gaps import RUNBOOK as GAPS_RUNBOOK
    from reconcile.gaps import describe as describe_gap

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
