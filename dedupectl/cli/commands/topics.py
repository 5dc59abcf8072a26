"""``dedupectl topics create``: input, output and dead-letter topics with matching partitions."""

from __future__ import annotations

from pathlib import Path

import typer

from dedupectl.cli.helpformat import Typer
from dedupectl.cli.options import (
    BootstrapOption,
    ConfigOption,
    DeadLetterTopicOption,
    InputTopicAliasOption,
    InputTopicOption,
    JsonOption,
    KafkaSettingOption,
    OutputTopicOption,
    given_once,
    parse_kafka_settings,
)
from dedupectl.cli.output import print_json, print_table
from dedupectl.config import resolve_worker_config
from dedupectl.errors import ConfigError

topics_app = Typer(help="Create the topics a worker needs.", no_args_is_help=True)


@topics_app.command("create")
def create(
    partition_count: int | None = typer.Option(None, "--partition-count", help="Partitions of each topic (required)."),
    partitions: int | None = typer.Option(None, "--partitions", "-p", hidden=True),  # its shipped spelling
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    topic: str | None = InputTopicOption,
    input_topic: str | None = InputTopicAliasOption,
    output_topic: str | None = OutputTopicOption,
    dead_letter_topic: str | None = DeadLetterTopicOption,
    replication_factor: int = typer.Option(-1, help="Replicas per partition (default: the broker's)."),
    kafka_setting: list[str] | None = KafkaSettingOption,
    json_output: bool = JsonOption,
) -> None:
    """Create input, output and dead-letter topics with the same partition count (existing ones are checked).

    Example: dedupectl topics create -b 127.0.0.1:9092 -t events -o events-deduped --partition-count 8
    """
    from dedupectl.kafka_clients import create_topics  # loads confluent_kafka: only when topics are made

    count = given_once(partition_count, partitions, "--partition-count", "-p/--partitions")
    if count is None:
        raise ConfigError("no partition count given", "pass --partition-count N: the partitions of each topic")

    worker_config = resolve_worker_config(
        config,
        flags={
            "bootstrap_servers": bootstrap_servers,
            "input_topic": given_once(topic, input_topic, "--topic", "--input-topic"),
            "output_topic": output_topic,
            "dead_letter_topic": dead_letter_topic,
            "kafka": parse_kafka_settings(kafka_setting),
        },
    )
    results = create_topics(
        worker_config.kafka,
        [worker_config.input_topic, worker_config.output_topic, worker_config.dead_letter_topic],
        count,
        replication_factor=replication_factor,
    )
    if json_output:
        print_json(results)
    else:
        print_table(
            "topics",
            ["topic", "partitions", "state"],
            [(r.topic, r.partitions, "created" if r.created else "exists") for r in results],
        )


def register(app: typer.Typer) -> None:
    app.add_typer(topics_app, name="topics")
