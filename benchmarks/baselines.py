"""Baselines measured in the same run as the worker, each in its own process (for a fair peak RSS).

- ``copy``: a plain transactional copy input -> output, batch by batch, no dedup: the floor cost of Kafka
  from Python with exactly-once transactions.
- ``naive``: the seed's naive loop: one store lookup, one produce, one transaction commit per message.

Usage: python benchmarks/baselines.py {copy|naive} BOOTSTRAP INPUT OUTPUT DATA_DIR [--max-seconds S]
Prints one JSON object: consumed, busy_seconds, peak_rss_mb.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from rocksdict import Options, Rdict

BATCH = 20_000


def _clients(bootstrap: str, name: str) -> tuple[Consumer, Producer]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{name}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{name}",
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    producer.init_transactions(30)
    return consumer, producer


def _assigned_partitions(consumer: Consumer, topic: str) -> int:
    metadata = consumer.list_topics(topic, timeout=30)
    return len(metadata.topics[topic].partitions)


def copy_loop(bootstrap: str, input_topic: str, output_topic: str, max_seconds: float) -> dict:
    consumer, producer = _clients(bootstrap, f"copy-{output_topic}")
    partitions = _assigned_partitions(consumer, input_topic)
    consumer.subscribe([input_topic])
    at_end: set[int] = set()
    consumed, first, last = 0, None, None
    deadline = time.monotonic() + max_seconds
    while len(at_end) < partitions and time.monotonic() < deadline:
        messages = consumer.consume(BATCH, 0.1)
        records = []
        for message in messages:
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            records.append(message)
        if not records:
            continue
        first = first or time.monotonic()
        producer.begin_transaction()
        next_offsets: dict[int, int] = {}
        for message in records:
            producer.produce(
                output_topic,
                message.value(),
                message.key(),
                message.partition(),
                timestamp=message.timestamp()[1],
                headers=message.headers(),
            )
            next_offsets[message.partition()] = message.offset() + 1
        producer.send_offsets_to_transaction(
            [TopicPartition(input_topic, p, o) for p, o in next_offsets.items()],
            consumer.consumer_group_metadata(),
        )
        producer.commit_transaction()
        last = time.monotonic()
        consumed += len(records)
    consumer.close()
    return {"consumed": consumed, "busy_seconds": (last - first) if first and last else 0.0}


def naive_loop(bootstrap: str, input_topic: str, output_topic: str, data_dir: str, max_seconds: float) -> dict:
    consumer, producer = _clients(bootstrap, f"naive-{output_topic}")
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    store = Rdict(data_dir, options=options)
    consumer.subscribe([input_topic])
    consumed, first, last = 0, None, None
    deadline = None
    while deadline is None or time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            if first is not None:
                break
            continue
        if message.error():
            if message.error().code() == KafkaError._PARTITION_EOF and first is not None:
                break
            continue
        if first is None:
            first = time.monotonic()
            deadline = first + max_seconds
        key = message.key()
        producer.begin_transaction()
        if store.get(key) is None:
            producer.produce(output_topic, message.value(), key, message.partition())
        producer.send_offsets_to_transaction(
            [TopicPartition(input_topic, message.partition(), message.offset() + 1)],
            consumer.consumer_group_metadata(),
        )
        producer.commit_transaction()
        store[key] = b"1"
        last = time.monotonic()
        consumed += 1
    consumer.close()
    store.close()
    return {"consumed": consumed, "busy_seconds": (last - first) if first and last else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["copy", "naive"])
    parser.add_argument("bootstrap")
    parser.add_argument("input_topic")
    parser.add_argument("output_topic")
    parser.add_argument("data_dir")
    parser.add_argument("--max-seconds", type=float, default=600)
    args = parser.parse_args()
    if args.mode == "copy":
        result = copy_loop(args.bootstrap, args.input_topic, args.output_topic, args.max_seconds)
    else:
        result = naive_loop(args.bootstrap, args.input_topic, args.output_topic, args.data_dir, args.max_seconds)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
