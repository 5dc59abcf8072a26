"""``dedupectl trace ID``: where one message went (dedupectl.trace does the work)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from dedupectl.cli.logs import setup_logging
from dedupectl.cli.options import (
    BootstrapOption,
    ConfigDataDirOption,
    ConfigOption,
    DeadLetterTopicOption,
    IdFieldOption,
    IdHeaderOption,
    InputTopicAliasOption,
    InputTopicOption,
    JsonOption,
    KafkaSettingOption,
    LogLevelOption,
    OutputTopicOption,
    SchemaFileOption,
    SchemaRegistryOption,
    SchemaRegistrySettingOption,
    ValueFormatOption,
    given_once,
    parse_kafka_settings,
    schema_flags,
)
from dedupectl.cli.output import console, print_json, print_table
from dedupectl.config import resolve_worker_config
from reconcile.ranges import FORMS, parse_bound
from store.sizes import format_duration

if TYPE_CHECKING:  # dedupectl.trace loads Kafka and RocksDB: imported when the command runs, not for --help
    from dedupectl.trace import Occurrence, TraceReport


def trace(
    message_id: str = typer.Argument(..., metavar="ID", help="The messageId to trace."),
    start: str | None = typer.Option(
        None, "--from", help=f"Start of the input range, inclusive (default: the store's window, else 24h): {FORMS}."
    ),
    stop: str | None = typer.Option(None, "--to", help="End of the input range, exclusive (default: its end)."),
    partition: int | None = typer.Option(
        None, "--partition", "-p", min=0, help="The input partition to read (default: from --partitioner)."
    ),
    partitioner: str = typer.Option(
        "murmur2",
        "--partitioner",
        help="How producers chose the partition: murmur2 (the Java client's default) or crc32 (librdkafka's).",
    ),
    group_id: str | None = typer.Option(None, "--group-id", help="The workers' group (default: dedupectl.<input>)."),
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    topic: str | None = InputTopicOption,
    input_topic: str | None = InputTopicAliasOption,
    output_topic: str | None = OutputTopicOption,
    dead_letter_topic: str | None = DeadLetterTopicOption,
    data_dir: Path | None = ConfigDataDirOption,
    value_format: str | None = ValueFormatOption,
    id_field: str | None = IdFieldOption,
    id_header: str | None = IdHeaderOption,
    schema_registry: str | None = SchemaRegistryOption,
    schema_registry_setting: list[str] | None = SchemaRegistrySettingOption,
    schema_file: list[str] | None = SchemaFileOption,
    kafka_setting: list[str] | None = KafkaSettingOption,
    log_level: str = LogLevelOption,
    json_output: bool = JsonOption,
) -> None:
    """Where did a message go? Every occurrence of ID in its input partition, what the worker did with each
    (published, dropped as a duplicate, dead-lettered, not consumed yet) and whether the store holds it.

    Reads one partition of the input, the output and the dead-letter topic, and says how much it read.

    Example: dedupectl trace 3f2a-9c1e -c /etc/dedupectl/dedupectl.toml --from 2h
    """
    setup_logging(log_level)
    worker = resolve_worker_config(
        config,
        flags={
            "bootstrap_servers": bootstrap_servers,
            "input_topic": given_once(topic, input_topic, "--topic", "--input-topic"),
            "output_topic": output_topic,
            "dead_letter_topic": dead_letter_topic,
            "group_id": group_id,
            "data_dir": data_dir,
            "value_format": value_format,
            "id_field": id_field,
            "id_header": id_header,
            **schema_flags(schema_registry, schema_registry_setting, schema_file),
            "kafka": parse_kafka_settings(kafka_setting),
        },
    )
    from dedupectl.trace import TraceRequest, trace_message

    request = TraceRequest(
        kafka=worker.kafka,
        input_topic=worker.input_topic,
        output_topic=worker.output_topic,
        dead_letter_topic=worker.dead_letter_topic,
        group_id=worker.group_id,
        message_id=message_id,
        start=None if start is None else parse_bound(start, "--from"),
        stop=None if stop is None else parse_bound(stop, "--to"),
        partition=partition,
        partitioner=partitioner,
        data_dir=Path(worker.data_dir) if Path(worker.data_dir).is_dir() else None,
        value_format=worker.value_format,
        id_field=worker.id_field,
        id_header=worker.id_header,
        schemas=worker.schemas,
    )
    report = trace_message(request)
    if json_output:
        print_json({**_as_dict(report), "records_scanned": report.records_scanned})
    else:
        _render(report)


def _as_dict(report: TraceReport) -> dict:
    return {name: getattr(report, name) for name in report.__dataclass_fields__}


def _when(timestamp_ms: int | None) -> str:
    if timestamp_ms is None:
        return "-"
    return datetime.fromtimestamp(timestamp_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%fZ")[:-4] + "Z"


def _what(o: Occurrence) -> str:
    from dedupectl.trace import DEAD_LETTERED, DUPLICATE, NOT_CONSUMED, PUBLISHED

    if o.outcome == PUBLISHED:
        return f"published at output offset {o.output_offset}"
    if o.outcome == DUPLICATE:
        of = "an occurrence before the range" if o.duplicate_of is None else f"offset {o.duplicate_of}"
        return f"dropped: a duplicate of {of}"
    if o.outcome == DEAD_LETTERED:
        return f"dead-lettered at offset {o.dead_letter_offset}: {o.reason}"
    assert o.outcome == NOT_CONSUMED
    return "not consumed yet (at or past the committed offset)"


STALE = "; no worker running from that data directory holds the partition now: this copy may be behind"
_OTHER_PARTITIONER = (
    ": if the producers chose another partition, give --partitioner (crc32 for librdkafka's default) or -p"
)
_OLDER_THAN_WINDOW = ": the store aged the id out (below), so its occurrences are older; --from reaches back to them"


def _render(report: TraceReport) -> None:
    committed = "none" if report.committed_offset is None else report.committed_offset
    title = (
        f"{report.message_id} in {report.input_topic}[{report.partition}] (partition {report.partition_from}; "
        f"from {report.range_from}; committed offset {committed})"
    )
    rows = [(o.offset, _when(o.timestamp_ms), escape(_what(o))) for o in report.occurrences]
    if rows:
        print_table(escape(title), ["input offset", "timestamp", "what the worker did"], rows)
    else:
        hint = _no_occurrence_hint(report)
        console.print(f"{escape(title)}\nno occurrence in the range read{hint}", highlight=False)
    for publication in report.other_publications:
        console.print(
            f"also in the output at offset {publication.offset} ({_when(publication.timestamp_ms)}): published from "
            "an occurrence before the range read",
            highlight=False,
        )
    console.print(f"store: {escape(_store_line(report))}", highlight=False)
    reads = ", ".join(
        f"{s.topic}[{s.partition}] {s.start_offset}-{s.stop_offset} ({s.records:,})" for s in report.scanned
    )
    console.print(f"read {report.records_scanned:,} records in {report.seconds:.1f}s: {escape(reads)}", highlight=False)


def _no_occurrence_hint(report: TraceReport) -> str:
    if report.store.aged_out:
        return _OLDER_THAN_WINDOW
    return "" if report.partition_from.startswith("given") else _OTHER_PARTITIONER


def _store_line(report: TraceReport) -> str:
    store = report.store
    window = "" if store.window_seconds is None else f"; window {format_duration(store.window_seconds)}"
    stale = "" if store.live or not store.checked else STALE
    if not store.held:
        return f"{store.note}{window}{stale}"
    age = format_duration(store.age_seconds)
    return f"{store.note} (sequence {store.seq}, recorded {age} ago{window}){stale}"


def register(app: typer.Typer) -> None:
    app.command("trace")(trace)
