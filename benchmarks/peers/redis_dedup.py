"""Redis ``SET messageId 1 NX EX window`` in front of a plain consumer/producer (the in-memory approach).

Per batch: one pipelined round trip of ``SET key 1 NX EX window`` (a key set for the first time wins), produce
the winners with the idempotent producer, flush, then commit the input offsets: at-least-once Kafka with the
dedup decision in Redis. Nothing ties the Redis write to the Kafka commit, so a crash after the ``SET`` and
before the produce reaches the broker forgets nothing in Redis but loses the record: the redelivered copy is
dropped as a duplicate. Stops after ``--idle-seconds`` without input. Prints one JSON object.

    python benchmarks/peers/redis_dedup.py BOOTSTRAP INPUT OUTPUT --redis-port P [--window-seconds S]
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import `benchmarks.peers` from the checkout, not siblings
    sys.path[0] = str(Path(__file__).resolve().parents[2])

import redis
from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.peers._common import BATCH, IdleClock, Progress, consumer_settings, peer_arguments, producer_settings


def redis_loop(
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    client: redis.Redis,
    window_seconds: int,
    idle_seconds: float,
    group: str = "",
) -> Progress:
    consumer = Consumer(consumer_settings(bootstrap, group or f"bench-redis-{output_topic}"))
    producer = Producer(producer_settings(bootstrap, **{"enable.idempotence": True}))
    consumer.subscribe([input_topic])
    progress, idle = Progress(), IdleClock(idle_seconds)
    while not idle.expired():
        records = [m for m in consumer.consume(BATCH, 0.1) if not m.error()]
        if not records:
            continue
        idle.active()
        progress.consumed_some(len(records))
        pipe = client.pipeline(transaction=False)
        for message in records:
            pipe.set(message.key(), b"1", nx=True, ex=window_seconds)
        next_offsets: dict[int, int] = {}
        for message, first_time in zip(records, pipe.execute(), strict=True):
            if first_time:
                producer.produce(output_topic, message.value(), message.key(), message.partition())
                progress.published += 1
            next_offsets[message.partition()] = message.offset() + 1
        producer.flush()
        consumer.commit(
            offsets=[TopicPartition(input_topic, p, o) for p, o in next_offsets.items()], asynchronous=False
        )
        progress.committed()
    consumer.close()
    return progress


def main() -> None:
    parser = peer_arguments(__doc__)
    parser.add_argument("--redis-port", type=int, required=True)
    parser.add_argument("--redis-host", default="127.0.0.1")
    parser.add_argument("--window-seconds", type=int, default=24 * 3600, help="EX: how long an id is remembered")
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--group", default="")
    args = parser.parse_args()
    client = redis.Redis(host=args.redis_host, port=args.redis_port)
    progress = redis_loop(
        args.bootstrap,
        args.input_topic,
        args.output_topic,
        client,
        args.window_seconds,
        args.idle_seconds,
        args.group,
    )
    progress.emit(redis_keys=client.dbsize())


if __name__ == "__main__":
    main()
