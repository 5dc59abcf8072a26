"""``dedupectl repartition plan|build|cutover``: adding input partitions without a window of duplicates."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from dedupectl.cli.commands.spark import (
    BulkMaxKeysOption,
    ConfOption,
    MasterOption,
    PrintSubmitOption,
    SparkKafkaOption,
    _java_settings,
    _print_submit,
    _run_and_show,
    _settings,
    _worker_config,
)
from dedupectl.cli.helpformat import Typer
from dedupectl.cli.json_errors import JsonErrorsCommand, json_errors
from dedupectl.cli.logs import setup_logging
from dedupectl.cli.options import (
    BootstrapOption,
    ConfigDataDirOption,
    ConfigOption,
    GroupIdOption,
    InputTopicOption,
    JsonOption,
    KafkaSettingOption,
    LogLevelOption,
    OutputTopicOption,
    parse_kafka_settings,
)
from dedupectl.cli.output import console, print_json, print_table
from store.sizes import format_duration, format_size

repartition_app = Typer(
    help="Give the input and output topics more partitions without a window of duplicates: plan, build, cutover.",
    no_args_is_help=True,
)

PartitionCountOption = typer.Option(
    ..., "--partition-count", help="The new partition count of both topics (above the current one)."
)
PartitionerOption = typer.Option(
    "auto",
    "--partitioner",
    help="The producers' partitioner: murmur2 (Java), crc32 (librdkafka's default), or auto (found in the output).",
)


def _worker(config, bootstrap_servers, topic, output_topic, data_dir, kafka_setting, **more):
    return _worker_config(
        config,
        {
            "bootstrap_servers": bootstrap_servers,
            "input_topic": topic,
            "output_topic": output_topic,
            "data_dir": data_dir,
            "kafka": parse_kafka_settings(kafka_setting),
            **more,
        },
    )


@repartition_app.command("plan", cls=JsonErrorsCommand)
def plan(
    partition_count: int = PartitionCountOption,
    partitioner: str = PartitionerOption,
    rate: float | None = typer.Option(
        None, "--rate", help="The build's rate in ids per second, as measured on your Spark (for its duration)."
    ),
    data_dir: Path | None = ConfigDataDirOption,
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    topic: str | None = InputTopicOption,
    output_topic: str | None = OutputTopicOption,
    kafka_setting: list[str] | None = KafkaSettingOption,
    log_level: str = LogLevelOption,
    json_output: bool = JsonOption,
) -> None:
    """Show what a change to --partition-count partitions takes (read-only): counts, partitioner, stores, disk, time.

    Example: dedupectl repartition plan -c /etc/dedupectl/dedupectl.toml --partition-count 8
    """
    from dedupectl.repartition.plan import PlanRequest, make_plan

    setup_logging(log_level)
    with json_errors(json_output):
        worker = _worker(config, bootstrap_servers, topic, output_topic, data_dir, kafka_setting)
        request = PlanRequest(
            worker.kafka,
            worker.input_topic,
            worker.output_topic,
            Path(worker.data_dir),
            partition_count,
            partitioner,
            rate,
        )
        result = make_plan(request)
    if json_output:
        print_json(asdict(result))
        return
    found = "found in the output" if result.partitioner_found else "as given"
    took = "pass --rate" if result.build_seconds is None else format_duration(result.build_seconds)
    measured = "the old stores here" if result.bytes_per_id_measured else "the bound's figure: no old store here"
    print_table(
        f"repartition {result.input_topic} -> {result.output_topic}",
        ["", ""],
        [
            ("partitions", f"{result.old_count} -> {result.new_count}"),
            ("partitioner", f"{result.partitioner} ({found})"),
            ("stores to build", f"{len(result.stores)} (partitions 0-{result.new_count - 1})"),
            ("output records", f"{result.output_records:,}"),
            ("bytes per id", f"{result.bytes_per_id:.1f} ({measured})"),
            ("disk needed", f"{format_size(result.disk_needed)} of {format_size(result.disk_free)} free"),
            ("build time", took),
            ("staging", str(result.staging)),
        ],
    )


@repartition_app.command("build")
def build(
    partition_count: int = PartitionCountOption,
    partitioner: str = PartitionerOption,
    replace: bool = typer.Option(False, "--replace", help="Delete a build already staged and build again."),
    max_keys: int | None = BulkMaxKeysOption,
    data_dir: Path | None = ConfigDataDirOption,
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    topic: str | None = InputTopicOption,
    output_topic: str | None = OutputTopicOption,
    kafka_setting: list[str] | None = KafkaSettingOption,
    spark_kafka_option: list[str] | None = SparkKafkaOption,
    master: str = MasterOption,
    conf: list[str] | None = ConfOption,
    print_submit: bool = PrintSubmitOption,
    log_level: str = LogLevelOption,
    json_output: bool = JsonOption,
) -> None:
    """Build every new partition's store from the output in bulk, beside the old ones (workers keep running).

    Example: dedupectl repartition build -c /etc/dedupectl/dedupectl.toml --partition-count 8
    """
    from dedupectl.spark.repartition import BuildRequest
    from dedupectl.spark.repartition import build as run

    setup_logging(log_level)
    settings = _settings(master, conf, "dedupectl-repartition")
    if print_submit:
        _print_submit(settings, "repartition build")
        return
    worker = _worker(config, bootstrap_servers, topic, output_topic, data_dir, kafka_setting, max_keys=max_keys)
    request = BuildRequest(
        kafka=worker.kafka,
        input_topic=worker.input_topic,
        output_topic=worker.output_topic,
        data_dir=Path(worker.data_dir),
        new_count=partition_count,
        partitioner=partitioner,
        kafka_java_settings=_java_settings(spark_kafka_option),
        replace=replace,
        window_ids=worker.max_keys,
    )
    _run_and_show(run, request, settings, json_output, asdict, _render_build)


def _render_build(report) -> None:
    print_table(
        f"repartition build {report.old_count} -> {report.new_count} ({report.partitioner}) in {report.staging}",
        ["partition", "ids", "repeats", "SST"],
        [
            (store.partition, f"{store.ids:,}", f"{store.records - store.ids:,}", format_size(store.sst_bytes))
            for store in report.stores
        ],
    )
    read_to = ", ".join(f"{partition}: {offset}" for partition, offset in enumerate(report.read_to))
    console.print(f"output read to offsets {read_to}; {report.ids_per_second:,.0f} ids/s")
    if report.unkeyed_records:
        console.print(f"{report.unkeyed_records:,} output records without a key were skipped (not the worker's)")
    console.print("next: stop the workers (SIGTERM), then `dedupectl repartition cutover`")


@repartition_app.command("cutover", cls=JsonErrorsCommand)
def cutover(
    data_dir: Path | None = ConfigDataDirOption,
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    topic: str | None = InputTopicOption,
    output_topic: str | None = OutputTopicOption,
    kafka_setting: list[str] | None = KafkaSettingOption,
    group_id: str | None = GroupIdOption,
    log_level: str = LogLevelOption,
    json_output: bool = JsonOption,
) -> None:
    """With the workers stopped: fold in what they published since the build, add the partitions (output
    first, then input) and put the new stores in place of the old (moved aside and kept).

    Example: dedupectl repartition cutover -c /etc/dedupectl/dedupectl.toml
    """
    from dedupectl.repartition.cutover import CutoverRequest
    from dedupectl.repartition.cutover import cutover as run

    setup_logging(log_level)
    with json_errors(json_output):
        worker = _worker(config, bootstrap_servers, topic, output_topic, data_dir, kafka_setting, group_id=group_id)
        request = CutoverRequest(
            worker.kafka,
            worker.input_topic,
            worker.output_topic,
            Path(worker.data_dir),
            worker.group_id,
            worker.session_timeout_ms,
        )
        report = run(request)
    if json_output:
        print_json(asdict(report))
        return
    print_table(
        f"repartition cutover {report.old_count} -> {report.new_count} ({report.partitioner})",
        ["old partition", "tail offsets", "records", "ids recorded"],
        [
            (tail.partition, f"{tail.offsets[0]}-{tail.offsets[1]}", f"{tail.records:,}", f"{tail.recorded:,}")
            for tail in report.tails
        ],
    )
    for path in report.moved_aside:
        console.print(f"old store kept at {path}")
    console.print(
        f"start the workers with --partitioner {report.partitioner} --misrouted forward ({report.seconds:.1f}s)"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(repartition_app, name="repartition")
