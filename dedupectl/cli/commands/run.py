"""``dedupectl run``: the dedup worker."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dedupectl.cli.logs import setup_logging
from dedupectl.cli.options import (
    BootstrapOption,
    ConfigDataDirOption,
    ConfigOption,
    DeadLetterTopicOption,
    DuplicatesTopicOption,
    GroupIdOption,
    IdFieldOption,
    IdHeaderOption,
    InputTopicAliasOption,
    InputTopicOption,
    JsonOption,
    KafkaSettingOption,
    MaxBytesOption,
    MaxKeysOption,
    OutputTopicOption,
    SchemaFileOption,
    SchemaRegistryOption,
    SchemaRegistrySettingOption,
    ValueFormatOption,
    WorkerLogLevelOption,
    given_once,
    parse_kafka_settings,
    schema_flags,
)
from dedupectl.cli.output import print_json, print_table
from dedupectl.config import resolve_worker_config

if TYPE_CHECKING:
    from dedupectl.worker import RunSummary

log = logging.getLogger("dedupectl.run")


def run(
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    topic: str | None = InputTopicOption,
    input_topic: str | None = InputTopicAliasOption,
    output_topic: str | None = OutputTopicOption,
    dead_letter_topic: str | None = DeadLetterTopicOption,
    duplicates_topic: str | None = DuplicatesTopicOption,
    group_id: str | None = GroupIdOption,
    data_dir: Path | None = ConfigDataDirOption,
    worker_id: str | None = typer.Option(
        None, "--worker-id", help="Stable name of this worker (static group member) (default: hostname)."
    ),
    batch_max_messages: int | None = typer.Option(None, help="Most records in one batch/transaction."),
    batch_max_bytes: int | None = typer.Option(None, help="Most value bytes in one batch."),
    batch_max_ms: int | None = typer.Option(None, help="Longest wait to fill a batch, ms."),
    value_format: str | None = ValueFormatOption,
    id_field: str | None = IdFieldOption,
    id_header: str | None = IdHeaderOption,
    schema_registry: str | None = SchemaRegistryOption,
    schema_registry_setting: list[str] | None = SchemaRegistrySettingOption,
    schema_file: list[str] | None = SchemaFileOption,
    partitioner: str | None = typer.Option(
        None,
        "--partitioner",
        help="Check each keyed record's partition against murmur2 (Java), crc32 (librdkafka), auto (found from "
        "the first records) or any (no check) (default auto).",
    ),
    misrouted: str | None = typer.Option(
        None,
        "--misrouted",
        help="A record in the wrong partition: publish (counted, logged), dead-letter (reason misrouted) or "
        "forward (to its partition's input, after a repartition) (default publish).",
    ),
    metrics_port: int | None = typer.Option(None, "--metrics-port", help="Serve Prometheus metrics here."),
    metrics_host: str | None = typer.Option(None, "--metrics-host", help="Address for --metrics-port."),
    max_keys: int | None = MaxKeysOption,
    max_bytes: str | None = MaxBytesOption,
    memtable_budget: str | None = typer.Option(
        None,
        "--memtable-budget",
        help="Memory for the memtables of all held partitions together, e.g. 256MiB (default 64MiB).",
    ),
    snapshot_every: str | None = typer.Option(
        None, "--snapshot-every", help="Snapshot every held partition this often, e.g. 1h (failures never stop it)."
    ),
    snapshot_to: str | None = typer.Option(
        None, "--snapshot-to", help="Snapshot destination: a directory, s3://bucket/prefix or ebs:vol-…"
    ),
    snapshot_keep: int | None = typer.Option(
        None, "--snapshot-keep", help="Keep the newest N snapshots per partition."
    ),
    broker_retry_for: str | None = typer.Option(
        None,
        "--broker-retry-for",
        help="Ride out transient Kafka faults (a broker restarting, timeouts) this long before exiting (default 5m).",
    ),
    stop_timeout: str | None = typer.Option(
        None,
        "--stop-timeout",
        help="After SIGTERM, exit at once if the stop has not finished within this long (default 60s).",
    ),
    observe: bool | None = typer.Option(
        None,
        "--observe",
        help="Decide as a worker would, against a store and group of its own (<group>.observe, <data-dir>.observe),"
        " and publish nothing: report what it would publish and drop.",
    ),
    leave_group_on_stop: bool | None = typer.Option(
        None,
        "--leave-group-on-stop",
        help="Join as a dynamic group member, so a stop moves this worker's partitions at once (for scale-in).",
    ),
    kafka_setting: list[str] | None = KafkaSettingOption,
    exit_on_idle: float | None = typer.Option(
        None, "--exit-on-idle", help="Exit 0 after this many seconds without input (batch jobs, demos)."
    ),
    log_level: str = WorkerLogLevelOption,
    json_output: bool = JsonOption,
) -> None:
    """Run the dedup worker: publish each messageId once, exactly once, across crashes.

    SIGTERM or Ctrl-C finishes the batch in hand, commits it, closes the stores and exits 0; a second one, or
    --stop-timeout running out, ends the worker at once (safe: recovery covers the batch in hand).

    Example: dedupectl run -b 127.0.0.1:9092 -t events -o events-deduped -d /var/lib/dedupectl
    """
    # the worker and its metrics load Kafka, RocksDB and Prometheus: only when a worker runs
    from dedupectl.metrics import WorkerMetrics
    from dedupectl.worker import Worker, stop_on_signals

    setup_logging(log_level)
    worker_config = resolve_worker_config(
        config,
        flags={
            "bootstrap_servers": bootstrap_servers,
            "input_topic": given_once(topic, input_topic, "--topic", "--input-topic"),
            "output_topic": output_topic,
            "dead_letter_topic": dead_letter_topic,
            "duplicates_topic": duplicates_topic,
            "group_id": group_id,
            "data_dir": data_dir,
            "worker_id": worker_id,
            "batch_max_messages": batch_max_messages,
            "batch_max_bytes": batch_max_bytes,
            "batch_max_ms": batch_max_ms,
            "value_format": value_format,
            "id_field": id_field,
            "id_header": id_header,
            **schema_flags(schema_registry, schema_registry_setting, schema_file),
            "partitioner": partitioner,
            "misrouted": misrouted,
            "metrics_port": metrics_port,
            "metrics_host": metrics_host,
            "max_keys": max_keys,
            "max_bytes": max_bytes,
            "memtable_budget": memtable_budget,
            "snapshot_every": snapshot_every,
            "snapshot_to": snapshot_to,
            "snapshot_keep": snapshot_keep,
            "broker_retry_for": broker_retry_for,
            "stop_timeout": stop_timeout,
            "leave_group_on_stop": leave_group_on_stop,
            "observe": observe,
            "kafka": parse_kafka_settings(kafka_setting),
        },
    )
    metrics = WorkerMetrics()
    if worker_config.metrics_port is not None:  # bound before the worker starts, so a busy port stops nothing
        port = metrics.serve(worker_config.metrics_port, worker_config.metrics_host)
        log.info("metrics on http://%s:%d/metrics", worker_config.metrics_host, port)
    worker = Worker(worker_config, metrics)
    summary = worker.run(
        stop_on_signals(worker_config.stop_timeout), exit_on_idle_s=exit_on_idle, on_progress=_progress_logger()
    )
    _render(
        summary, json_output, duplicates_topic=worker_config.duplicates_topic is not None, observe=worker_config.observe
    )


def _progress_logger():
    last = {"consumed": 0}

    def report(summary: RunSummary) -> None:
        if summary.consumed != last["consumed"]:
            log.info(
                "consumed %d, published %d, duplicates %d, dead letters %d",
                summary.consumed,
                summary.published,
                summary.duplicates,
                summary.dead_letters,
            )
            last["consumed"] = summary.consumed

    return report


def _render(summary: RunSummary, json_output: bool, *, duplicates_topic: bool = False, observe: bool = False) -> None:
    from dedupectl.metrics import peak_rss_bytes

    rate = summary.consumed / summary.busy_seconds if summary.busy_seconds else 0.0
    figures = {
        "consumed": summary.consumed,
        "published": summary.published,
        "duplicates_dropped": summary.duplicates,
        **({"duplicates_produced": summary.duplicates_produced} if duplicates_topic else {}),
        "dead_letters": summary.dead_letters,
        "misrouted": summary.misrouted,
        "unkeyed": summary.unkeyed,
        "recovered_ids": summary.recovered,
        "transactions_committed": summary.commits,
        "transactions_aborted": summary.aborts,
        "busy_seconds": round(summary.busy_seconds, 3),
        "messages_per_second": round(rate, 1),
        "peak_rss_mb": round(peak_rss_bytes() / 2**20, 1),
    }
    if json_output:  # an observer's published and dead letters are what a worker would have written
        print_json({"observed": True, **figures} if observe else figures)
    else:
        # thousands grouped, as in every other table (--json keeps plain numbers)
        title = "dedupectl run --observe (nothing published)" if observe else "dedupectl run"
        print_table(title, ["figure", "value"], [(name, f"{value:,}") for name, value in figures.items()])


def register(app: typer.Typer) -> None:
    app.command("run")(run)
