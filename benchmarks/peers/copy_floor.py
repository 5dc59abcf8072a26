"""The floor: a bare transactional copy input -> output, batch by batch, no dedup.

What exactly-once Kafka costs from Python before any dedup work. It stops when every input partition is
at its end (or after ``--max-seconds``); with ``--idle-seconds`` it runs past the input's end (records still
arriving: the latency run) and stops after that long without a record. Prints one JSON object (see
``_common.Progress``).

    python benchmarks/peers/copy_floor.py BOOTSTRAP INPUT OUTPUT [--group G] [--max-seconds S] [--idle-seconds S]
        [--fetch-queue-backoff-ms MS]

``--fetch-queue-backoff-ms`` sets the consumer's ``fetch.queue.backoff.ms`` (librdkafka's default: 1000), as
``dedupectl run`` sets its own: the copy then fetches on the same terms as the worker.

(Named ``copy_floor``, not ``copy``: a script's folder goes first on ``sys.path``, and a ``copy.py`` there
would shadow the standard library's ``copy`` for every import.)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import `benchmarks.peers` from the checkout, not siblings
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from benchmarks.peers._common import BATCH, IdleClock, Progress, consumer_settings, peer_arguments, producer_settings


def copy_loop(
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    max_seconds: float,
    group: str = "",
    idle_seconds: float = 0,
    fetch_queue_backoff_ms: int | None = None,
) -> Progress:
    group = group or f"bench-copy-{output_topic}"
    extra = {} if fetch_queue_backoff_ms is None else {"fetch.queue.backoff.ms": fetch_queue_backoff_ms}
    consumer = Consumer(consumer_settings(bootstrap, group, **{"enable.partition.eof": True}, **extra))
    # a stable transactional.id: a restarted copy fences its killed predecessor at once
    producer = Producer(producer_settings(bootstrap, **{"transactional.id": group}))
    producer.init_transactions(30)
    partitions = len(consumer.list_topics(input_topic, timeout=30).topics[input_topic].partitions)
    consumer.subscribe([input_topic])
    progress, at_end = Progress(), set()
    idle = IdleClock(idle_seconds) if idle_seconds > 0 else None
    deadline = time.monotonic() + max_seconds
    while (idle is not None or len(at_end) < partitions) and time.monotonic() < deadline:
        if idle is not None and idle.expired():
            break
        records = []
        for message in consumer.consume(BATCH, 0.1):
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            records.append(message)
        if not records:
            continue
        if idle is not None:
            idle.active()
        progress.consumed_some(len(records))
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
        progress.published += len(records)
        progress.committed()
    consumer.close()
    return progress


def main() -> None:
    parser = peer_arguments(__doc__)
    parser.add_argument("--group", default="", help="consumer group and transactional.id (default: per output)")
    parser.add_argument("--max-seconds", type=float, default=3600)
    parser.add_argument("--idle-seconds", type=float, default=0, help="run past the input's end; stop when idle")
    parser.add_argument("--fetch-queue-backoff-ms", type=int, help="the consumer's fetch.queue.backoff.ms")
    args = parser.parse_args()
    copy_loop(
        args.bootstrap,
        args.input_topic,
        args.output_topic,
        args.max_seconds,
        args.group,
        args.idle_seconds,
        args.fetch_queue_backoff_ms,
    ).emit()


if __name__ == "__main__":
    main()
