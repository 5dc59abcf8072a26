"""The end-to-end demo: a local broker, a stream of Segment-like events with duplicates and a few bad
records, one worker over it, and a check of the output topic that proves the result is exactly once."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dedupectl.config import KafkaConfig, resolve_worker_config
from dedupectl.devbroker import LocalBroker
from dedupectl.kafka_clients import create_topics
from dedupectl.kafka_jars import ensure_kafka_libs
from dedupectl.sample_events import SampleReport, SampleSpec, generate, produce_sample
from dedupectl.verify import OutputCheck, check_output, count_ids
from dedupectl.worker import RunSummary, Worker

INPUT, OUTPUT, DEAD_LETTERS = "demo-events", "demo-events-deduped", "demo-events.dead-letter"
PARTITIONS = 4


@dataclass(frozen=True)
class DemoResult:
    sample: SampleReport
    run: RunSummary
    output: OutputCheck
    dead_letters_in_topic: int

    @property
    def exactly_once(self) -> bool:
        return self.output.exactly_once and self.dead_letters_in_topic == self.sample.invalid

    def figures(self) -> dict[str, int | float | bool]:
        """The summary by field name, in the order it is shown (``--json`` prints it as it is)."""
        busy = self.run.busy_seconds
        return {
            "messages_in": self.sample.produced,
            "distinct_valid_ids_in": self.sample.distinct_ids,
            "duplicates_in": self.sample.duplicates,
            "invalid_in": self.sample.invalid,
            "published": self.run.published,
            "duplicates_dropped": self.run.duplicates,
            "dead_letters": self.run.dead_letters,
            "output_records": self.output.records,
            "output_ids_published_twice": self.output.duplicated_ids,
            "valid_ids_missing_from_output": self.output.missing_ids,
            "dead_letter_topic_records": self.dead_letters_in_topic,
            "messages_per_second": round(self.run.consumed / busy, 1) if busy else 0.0,
            "exactly_once": self.exactly_once,
        }


def run_demo(
    count: int,
    *,
    duplicate_ratio: float = 0.006,
    invalid_ratio: float = 0.001,
    step: Callable[[str], None] = lambda _: None,
    on_progress: Callable[[RunSummary], None] | None = None,
) -> DemoResult:
    step("fetching the Kafka broker (Maven Central, cached after the first run)")
    ensure_kafka_libs()
    with tempfile.TemporaryDirectory(prefix="dedupectl-demo-") as scratch:
        step("starting a local Kafka broker on 127.0.0.1")
        with LocalBroker(Path(scratch) / "broker") as broker:
            kafka = KafkaConfig(broker.bootstrap_servers)
            step(f"creating {INPUT}, {OUTPUT} and {DEAD_LETTERS} with {PARTITIONS} partitions")
            create_topics(kafka, [INPUT, OUTPUT, DEAD_LETTERS], PARTITIONS)
            spec = SampleSpec(count, duplicate_ratio=duplicate_ratio, invalid_ratio=invalid_ratio)
            step(f"producing {count:,} events ({duplicate_ratio:.1%} duplicates, {invalid_ratio:.1%} invalid)")
            sample = produce_sample(kafka, INPUT, spec)
            step("running the dedup worker until the input is drained")
            config = resolve_worker_config(
                env={},
                flags={
                    "bootstrap_servers": broker.bootstrap_servers,
                    "input_topic": INPUT,
                    "output_topic": OUTPUT,
                    "dead_letter_topic": DEAD_LETTERS,
                    "data_dir": Path(scratch) / "data",
                    "worker_id": "demo",
                },
            )
            summary = Worker(config).run(threading.Event(), exit_on_idle_s=3, on_progress=on_progress)
            step("reading the output topic back (read_committed)")
            expected = {record.key for record in generate(spec) if record.kind == "new"}
            output = check_output(kafka, OUTPUT, expected)
            dead_letters = sum(count_ids(kafka, DEAD_LETTERS).values())
    return DemoResult(sample, summary, output, dead_letters)
