"""``dedupectl topics create``: input, output and dead-letter topics with matching partitions."""

from __future__ import annotations

from pathlib import Path

import typer

from dedupectl.cli.helpformat import Typer
from dedupectl.cli.options import (
    BootstrapOption,
    ConfigOption,
    DeadLetterTopicOption,
    InputTopicOption,
    JsonOption,
    KafkaSettingOption,
    OutputTopicOption,
    parse_kafka_settings,
)
from dedupectl.cli.output import print_json, print_table
from dedupectl.config import resolve_worker_config

topics_app = Typer(help="Create the topics a worker needs.", no_args_is_help=True)


@topics_app.command("create")
def create(
    partitions: int = typer.Option(..., "--partitions", "-p", help="Partitions of each topic."),
    config: Path | None = ConfigOption,
    bootstrap_servers: str | None = BootstrapOption,
    input_topic: str | None = InputTopicOption,
    output_topic: str | None = OutputTopicOption,
    dead_letter_topic: str | None = DeadLetterTopicOption,
    replication_factor: int = typer.Option(-1, help="Replicas per partition (default: the broker's)."),
    kafka_setting: list[str] | None = KafkaSettingOption,
    json_output: bool = JsonOption,
) -> None:
    """Create input, output and dead-letter topics with the same partition count (existing ones are checked).

    Example: dedupectl topics create -b 127.0.0.1:9092 -i events -o events-deduped -p 8
    """
    from dedupectl.kafka_clients import create_topics  # loads confluent_kafka: only when topics are made

    worker_config = resolve_worker_config(
        config,
        flags={
            "bootstrap_servers": bootstrap_servers,
            "input_topic": input_topic,
            "output_topic": output_topic,
            "dead_letter_topic": dead_letter_topic,
            "kafka": parse_kafka_settings(kafka_setting),
        },
    )
    results = create_topics(
        worker_config.kafka,
        [worker_config.input_topic, worker_config.output_topic, worker_config.dead_letter_topic],
        partitions,
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
