"""``dedupectl audit``, ``replay`` and ``rebuild``: the Spark jobs (dedupectl/spark/)."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dedupectl.cli.logs import setup_logging
from dedupectl.cli.options import (
    BootstrapOption,
    CheckedDataDirOption,
    ConfigDataDirOption,
    ConfigOption,
    GroupIdOption,
    IdFieldOption,
    IdHeaderOption,
    InputTopicAliasOption,
    InputTopicOption,
    JsonOption,
    KafkaSettingOption,
    LogLevelOption,
    OutputTopicOption,
    PartitionsOption,
    SchemaFileOption,
    SchemaRegistryOption,
    SchemaRegistrySettingOption,
    ValueFormatOption,
    given_once,
    parse_kafka_settings,
    schema_flags,
)
from dedupectl.cli.output import console, err_console, print_error, print_json, print_table
from dedupectl.cli.progress import JobSteps, ProgressDisplay
from dedupectl.config import WorkerConfig, resolve_worker_config
from reconcile.ranges import FORMS, parse_bound
from store.sizes import format_duration, format_size

if TYPE_CHECKING:
    from dedupectl.spark.session import SparkSettings

# dedupectl.spark.session (and its jars and process helpers) is imported when a job runs, not for --help; its
# DEFAULT_MASTER is named here (a test holds the two together)
DEFAULT_MASTER = "local[*]"
BulkMaxKeysOption = typer.Option(
    None, "--max-keys", help="The worker's bound (its --max-keys; default: the config's, else 10,000,000)."
)
MasterOption = typer.Option(
    DEFAULT_MASTER, "--master", help="Spark master: local[*], local[N], spark://host:7077, yarn, k8s://…"
)
ConfOption = typer.Option(None, "--conf", help="A Spark setting, key=value (repeatable), as spark-submit takes it.")
PrintSubmitOption = typer.Option(
    False, "--print-submit", help="Print the spark-submit command that runs this job on --master, and exit."
)
SparkKafkaOption = typer.Option(
    None,
    "--spark-kafka-option",
    help="A Java Kafka client setting for Spark's Kafka source, key=value (repeatable), e.g. security.protocol=SSL.",
)
FromOption = typer.Option(None, "--from", help=f"First input offset or time, inclusive: {FORMS}.")
ToOption = typer.Option(None, "--to", help="Last input offset or time, exclusive (default: the end).")


def _print_submit(settings: SparkSettings, command: str) -> None:
    from dedupectl.spark.session import submit_plan

    line, redacted = submit_plan(settings, command, sys.argv[1:])
    console.print(line, soft_wrap=True, highlight=False, markup=False)
    if redacted:
        err_console.print("secrets were redacted (***): give them to the job with --config or the environment")


def _settings(master: str, conf: list[str] | None, app_name: str) -> SparkSettings:
    from dedupectl.spark.session import SparkSettings, parse_conf

    return SparkSettings(master=master, conf=parse_conf(conf), app_name=app_name)


def _worker_config(config: Path | None, flags: dict) -> WorkerConfig:
    return resolve_worker_config(config, flags=flags)


def _java_settings(pairs: list[str] | None) -> dict[str, str]:
    from dedupectl.spark.session import parse_conf

    return parse_conf(pairs, "--spark-kafka-option", "security.protocol=SSL")


def _bound(text: str | None, option: str):
    return None if text is None else parse_bound(text, option)


def _finish(log_file: Path | None, seconds: float) -> None:
    where = f"; Spark log: {log_file}" if log_file else ""
    err_console.print(f"done in {seconds:.1f}s{where}", highlight=False)


def _run_and_show(run, request, settings: SparkSettings, json_output: bool, as_json, render):
    """Run a job with its progress on stderr (Ctrl-C cancels it: exit 130), then show its report: as JSON
    with where it ran and its Spark log, or rendered for people with the time it took. Returns the report."""
    started = time.monotonic()
    try:
        with ProgressDisplay() as display:
            steps = JobSteps(display)
            job = run(request, settings, sink=steps, notify=steps.notify)
    except KeyboardInterrupt:
        print_error("interrupted: the Spark job was cancelled; nothing it does is partial, run it again")
        raise typer.Exit(130) from None
    if json_output:
        print_json({**as_json(job.result), "master": job.master, "spark_log": job.log_file})
    else:
        render(job.result)
        _finish(job.log_file, time.monotonic() - started)
    return job.result


# -- audit ---------------------------------------------------------------------------------------------


def audit(
    partition: list[int] | None = PartitionsOption,
    start: str | None = FromOption,
    stop: str | None = ToOption,
    output_start: str | None = typer.Option(
        None, "--output-from", help="Compare this output range instead of the input's time span (with --output-to)."
    ),
    output_stop: str | None = typer.Option(None, "--output-to", help="End of the explicit output range, exclusive."),
    window: str | None = typer.Option(
        None, "--window", help="Dedup window, e.g. 24h: repeats further apart are not duplicates (default: none)."
    ),
    input_files: str | None = typer.Option(
        None, "--input-files", help="Read the input from archived files (Parquet or JSON lines) instead of Kafka."
    ),
    output_files: str | None = typer.Option(
        None, "--output-files", help="Read the output from archived files instead of Kafka."
    ),
    files_format: str = typer.Option("auto", "--files-format", help="auto (by file name), parquet or jsonl."),
    samples: int = typer.Option(5, "--samples", help="Ids shown per kind of violation and partition."),
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    topic: str | None = InputTopicOption,
    input_topic: str | None = InputTopicAliasOption,
    output_topic: str | None = OutputTopicOption,
    value_format: str | None = ValueFormatOption,
    id_field: str | None = IdFieldOption,
    id_header: str | None = IdHeaderOption,
    schema_registry: str | None = SchemaRegistryOption,
    schema_registry_setting: list[str] | None = SchemaRegistrySettingOption,
    schema_file: list[str] | None = SchemaFileOption,
    kafka_setting: list[str] | None = KafkaSettingOption,
    spark_kafka_option: list[str] | None = SparkKafkaOption,
    master: str = MasterOption,
    conf: list[str] | None = ConfOption,
    print_submit: bool = PrintSubmitOption,
    log_level: str = LogLevelOption,
    json_output: bool = JsonOption,
) -> None:
    """Prove a range was delivered exactly once: duplicates, losses and extras per partition.

    Reads the input and output (Kafka, or archived files) with Spark and compares their ids
    with the worker's own rules for valid ids. Exit 0: exactly once; 1: violations; 2: error.

    Example: dedupectl audit -c /etc/dedupectl/dedupectl.toml --from 2026-11-21 --to 2026-11-22 --window 24h
    """
    # pyspark is imported only by the Spark commands: every other command starts without it
    from dedupectl.spark.audit import AuditRequest, parse_window
    from dedupectl.spark.audit import audit as run
    from dedupectl.spark.audit_sides import audit_sides

    setup_logging(log_level)
    settings = _settings(master, conf, "dedupectl-audit")
    if print_submit:
        _print_submit(settings, "audit")
        return
    flags = {
        "bootstrap_servers": bootstrap_servers,
        "input_topic": given_once(topic, input_topic, "--topic", "--input-topic"),
        "output_topic": output_topic,
        "value_format": value_format,
        "id_field": id_field,
        "id_header": id_header,
        **schema_flags(schema_registry, schema_registry_setting, schema_file),
        "kafka": parse_kafka_settings(kafka_setting),
    }
    files = {"input_files": input_files, "output_files": output_files, "files_format": files_format}
    sides = audit_sides(config, flags, **files)
    request = AuditRequest(
        input=sides.input,
        output=sides.output,
        kafka=sides.kafka,
        kafka_java_settings=_java_settings(spark_kafka_option),
        partitions=tuple(partition) if partition else None,
        start=_bound(start, "--from"),
        stop=_bound(stop, "--to"),
        output_start=_bound(output_start, "--output-from"),
        output_stop=_bound(output_stop, "--output-to"),
        window_ms=None if window is None else parse_window(window),
        value_format=sides.value_format,
        id_field=sides.id_field,
        id_header=sides.id_header,
        schemas=sides.schemas,
        sample_size=samples,
    )
    report = _run_and_show(run, request, settings, json_output, _audit_json, _render_audit)
    raise typer.Exit(report.exit_code)


def _audit_json(report) -> dict:
    return {
        "exit_code": report.exit_code,
        "violations": report.violations,
        **{k: getattr(report, k) for k in ("input", "output", "window_ms", "seconds")},
        "dead_letter_reasons": dict(report.dead_letter_reasons),
        "partitions": list(report.partitions),
        "samples": list(report.samples),
    }


def _render_audit(report) -> None:
    rows = [
        (
            "-" if p.partition is None else p.partition,
            f"{p.input_records:,}",
            f"{p.distinct_ids:,}",
            f"{p.output_records:,}",
            f"{p.duplicate_ids:,}",
            f"{p.losses:,}",
            f"{p.extras:,}",
            p.status,
        )
        for p in report.partitions
    ]
    window = "whole range" if report.window_ms is None else format_duration(report.window_ms / 1000)
    print_table(
        f"audit {report.input} → {report.output} (window: {window})",
        ["partition", "input", "distinct ids", "output", "duplicates", "losses", "extras", "status"],
        rows,
    )
    if report.samples:
        print_table(
            "samples",
            ["kind", "partition", "id", "offsets"],
            [
                (
                    s.kind,
                    "-" if s.partition is None else s.partition,
                    s.id.decode("utf-8", "backslashreplace"),
                    ("input " if s.kind == "loss" else "output ") + ", ".join(map(str, s.offsets)),
                )
                for s in report.samples
            ],
            whole=("id",),
        )
    copies, dead = report.total("duplicate_records"), report.total("dead_letters")
    if copies:
        console.print(f"{copies:,} duplicate copies published beyond the first of their id")
    if dead:
        reasons = ", ".join(f"{reason} {count:,}" for reason, count in sorted(report.dead_letter_reasons.items()))
        console.print(f"{dead:,} input records without a valid id (dead letters: {reasons})")
    beyond = report.total("repeats_beyond_window")
    if beyond:
        console.print(f"{beyond:,} repeats further apart than the window (expected: the store forgets older ids)")
    without_id = report.total("output_without_id")
    if without_id:
        console.print(f"{without_id:,} output records without a key (not written by the worker)")
    total_in = report.total("input_records")
    rate = (total_in + report.total("output_records")) / report.seconds if report.seconds else 0.0
    verdict = "exactly once" if not report.violations else f"{report.violations:,} violations"
    console.print(f"{verdict}: {total_in:,} input records checked in {report.seconds:.1f}s ({rate:,.0f} records/s)")


# -- replay --------------------------------------------------------------------------------------------


def replay(
    partition: list[int] | None = PartitionsOption,
    start: str | None = FromOption,
    stop: str | None = ToOption,
    dry_run: bool = typer.Option(False, "--dry-run", help="Find what the output lacks; produce nothing."),
    data_dir: Path | None = CheckedDataDirOption,
    samples: int = typer.Option(5, "--samples", help="Replayed ids shown per partition."),
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    topic: str | None = InputTopicOption,
    input_topic: str | None = InputTopicAliasOption,
    output_topic: str | None = OutputTopicOption,
    group_id: str | None = GroupIdOption,
    value_format: str | None = ValueFormatOption,
    id_field: str | None = IdFieldOption,
    id_header: str | None = IdHeaderOption,
    schema_registry: str | None = SchemaRegistryOption,
    schema_registry_setting: list[str] | None = SchemaRegistrySettingOption,
    schema_file: list[str] | None = SchemaFileOption,
    kafka_setting: list[str] | None = KafkaSettingOption,
    spark_kafka_option: list[str] | None = SparkKafkaOption,
    master: str = MasterOption,
    conf: list[str] | None = ConfOption,
    print_submit: bool = PrintSubmitOption,
    log_level: str = LogLevelOption,
    json_output: bool = JsonOption,
) -> None:
    """Re-drive a range of the input: the worker publishes what the output lacks, never twice.

    The first record of each valid id the output lacks is produced again to the input topic (same
    partition, key, value, headers, timestamp); the worker dedups it like any input, so running
    twice or while the worker runs is safe. Ids past the worker group's committed offsets are not yet
    consumed: reported apart, not replayed. Records without a valid id are skipped and counted.
    Exit 0: done; 1: some ids are held by a store; 2: error.

    Example: dedupectl replay -c /etc/dedupectl/dedupectl.toml --from 2026-11-21T08:00Z --to 2026-11-21T09:00Z
    """
    from dedupectl.spark.replay import ReplayRequest
    from dedupectl.spark.replay import replay as run

    setup_logging(log_level)
    settings = _settings(master, conf, "dedupectl-replay")
    if print_submit:
        _print_submit(settings, "replay")
        return
    worker = _worker_config(
        config,
        {
            "bootstrap_servers": bootstrap_servers,
            "input_topic": given_once(topic, input_topic, "--topic", "--input-topic"),
            "output_topic": output_topic,
            "group_id": group_id,
            "value_format": value_format,
            "id_field": id_field,
            "id_header": id_header,
            **schema_flags(schema_registry, schema_registry_setting, schema_file),
            "kafka": parse_kafka_settings(kafka_setting),
        },
    )
    request = ReplayRequest(
        kafka=worker.kafka,
        input_topic=worker.input_topic,
        output_topic=worker.output_topic,
        kafka_java_settings=_java_settings(spark_kafka_option),
        partitions=tuple(partition) if partition else None,
        start=_bound(start, "--from"),
        stop=_bound(stop, "--to"),
        value_format=worker.value_format,
        id_field=worker.id_field,
        id_header=worker.id_header,
        schemas=worker.schemas,
        dry_run=dry_run,
        data_dir=data_dir,
        group_id=worker.group_id,
        sample_size=samples,
    )
    report = _run_and_show(run, request, settings, json_output, _replay_json, _render_replay)
    raise typer.Exit(report.exit_code)


def _replay_json(report) -> dict:
    return {
        "exit_code": report.exit_code,
        **{k: getattr(report, k) for k in ("input_topic", "output_topic", "dry_run", "seconds")},
        "replayed": report.total("replayed"),
        "not_yet_consumed": report.total("not_yet_consumed"),
        "invalid_records": report.total("invalid_records"),
        "partitions": list(report.partitions),
        "samples": list(report.samples),
    }


def _render_replay(report) -> None:
    _replay_table(report)
    if report.samples:
        print_table(
            "samples",
            ["partition", "id", "input offset"],
            [(s.partition, s.id.decode("utf-8", "backslashreplace"), s.offset) for s in report.samples],
            whole=("id",),
        )
    missing, replayed = report.total("missing"), report.total("replayed")
    if report.dry_run:
        console.print(f"{missing:,} records would be replayed; run without --dry-run to produce them")
    elif replayed:
        console.print(
            f"{replayed:,} records produced to {report.input_topic}: the worker publishes each id the output lacks"
            " (confirm with `dedupectl audit` once it caught up)"
        )
    else:
        console.print("nothing to replay: the output holds every valid id the worker consumed")
    _replay_notes(report)


def _replay_table(report) -> None:
    """One row per partition; the committed-offset and store columns only when replay had them."""
    grouped = any(p.committed_offset is not None for p in report.partitions)
    checked = any(p.held_by_store is not None for p in report.partitions)
    columns = ["partition", "offsets", "input", "invalid", "ids"]
    columns += [*(["committed", "not consumed yet"] if grouped else []), "missing", "replayed"]
    columns += ["held by store"] if checked else []
    rows = []
    for p in report.partitions:
        row = [p.partition, f"{p.input_offsets[0]}-{p.input_offsets[1]}", f"{p.input_records:,}"]
        row += [f"{p.invalid_records:,}", f"{p.distinct_ids:,}"]
        if grouped:
            row += ["-" if p.committed_offset is None else p.committed_offset, f"{p.not_yet_consumed:,}"]
        row += [f"{p.missing:,}", f"{p.replayed:,}"]
        if checked:
            row.append("-" if p.held_by_store is None else f"{p.held_by_store:,}")
        rows.append(row)
    title = f"replay {report.input_topic} (missing from {report.output_topic}){' --dry-run' if report.dry_run else ''}"
    print_table(title, columns, rows)


def _replay_notes(report) -> None:
    pending = report.total("not_yet_consumed")
    if pending:
        console.print(
            f"{pending:,} ids are past the worker's committed offsets (not yet consumed): the worker publishes"
            " them as it catches up; not replayed, nothing to fix"
        )
    invalid = report.total("invalid_records")
    if invalid:
        console.print(
            f"{invalid:,} records without a valid id were skipped: replay re-drives ids only (the worker"
            " dead-letters such records when it consumes them; `dedupectl audit` counts them)"
        )
    held = report.total("held_by_store")
    if held:
        console.print(
            f"{held:,} missing ids are still in their partition's store, so the worker drops their replay: "
            "stop the worker, run `dedupectl reconcile --apply -p P` (removes ids the output lacks), replay again"
        )


# -- rebuild -------------------------------------------------------------------------------------------


def rebuild(
    partition: int = typer.Option(..., "--partition", "-p", help="The partition whose store to build."),
    data_dir: Path | None = ConfigDataDirOption,
    replace: bool = typer.Option(
        False, "--replace", help="Move an existing store aside (to <store>.replaced-<time>) instead of refusing."
    ),
    max_keys: int | None = BulkMaxKeysOption,
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    topic: str | None = InputTopicOption,
    input_topic: str | None = InputTopicAliasOption,
    output_topic: str | None = OutputTopicOption,
    kafka_setting: list[str] | None = KafkaSettingOption,
    spark_kafka_option: list[str] | None = SparkKafkaOption,
    master: str = MasterOption,
    conf: list[str] | None = ConfOption,
    print_submit: bool = PrintSubmitOption,
    log_level: str = LogLevelOption,
    json_output: bool = JsonOption,
) -> None:
    """Build a partition's store from the output topic in bulk (sorted SST files, ingested).

    Same ids and sequence order as the worker's store for that output; the worker's recovery
    then reads only the output that came after. Needs the partition's worker stopped.

    Example: dedupectl rebuild -c /etc/dedupectl/dedupectl.toml --partition 3
    """
    from dedupectl.spark.rebuild import RebuildRequest
    from dedupectl.spark.rebuild import rebuild as run

    setup_logging(log_level)
    settings = _settings(master, conf, "dedupectl-rebuild")
    if print_submit:
        _print_submit(settings, "rebuild")
        return
    worker = _worker_config(
        config,
        {
            "bootstrap_servers": bootstrap_servers,
            "input_topic": given_once(topic, input_topic, "--topic", "--input-topic"),
            "output_topic": output_topic,
            "data_dir": data_dir,
            "max_keys": max_keys,
            "kafka": parse_kafka_settings(kafka_setting),
        },
    )
    request = RebuildRequest(
        kafka=worker.kafka,
        input_topic=worker.input_topic,
        output_topic=worker.output_topic,
        partition=partition,
        data_dir=Path(worker.data_dir),
        kafka_java_settings=_java_settings(spark_kafka_option),
        replace=replace,
        window_ids=worker.max_keys,
    )
    _run_and_show(run, request, settings, json_output, asdict, _render_rebuild)


def _render_rebuild(report) -> None:
    state = report.state
    print_table(
        f"rebuild {report.store}",
        ["partition", "output offsets", "records read", "ids", "repeats", "SST files", "next seq"],
        [
            (
                report.partition,
                f"{report.output_offsets[0]}-{report.output_offsets[1]}",
                f"{report.records_read:,}",
                f"{report.ids:,}",
                f"{report.duplicate_records:,}",
                f"{report.files} ({format_size(report.sst_bytes)})",
                f"{state.next_seq:,}",
            )
        ],
    )
    if report.unkeyed_records:
        console.print(f"{report.unkeyed_records:,} output records without a key were skipped (not the worker's)")
    if report.replaced is not None:
        console.print(f"the previous store was moved to {report.replaced}")
    if report.output_offsets[0] > 0:
        console.print(
            f"the output starts at offset {report.output_offsets[0]} (retention): ids published before are not in"
            " the store"
        )
    console.print(
        f"store covers the output up to offset {state.output_offset}: start the worker, its recovery reads the rest"
        f" (ordering {report.seconds_ordering:.1f}s, hand-over {report.seconds_handing_over:.1f}s,"
        f" SST files {report.seconds_writing:.1f}s, ingest {report.seconds_ingesting:.1f}s)"
    )


# -- registration --------------------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
    app.command("replay")(replay)
    app.command("rebuild")(rebuild)
