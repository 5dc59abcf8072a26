"""The seed's naive loop: per message, one RocksDB lookup, one produce, one transaction commit.

At one commit per message it would take hours over a million records, so it is time-bounded: its rate is
what counts. It writes the id to its store after the commit, as the seed does (a crash in between forgets
the id). Prints one JSON object (see ``_common.Progress``).

    python benchmarks/peers/naive.py BOOTSTRAP INPUT OUTPUT DATA_DIR [--group G] [--max-seconds S]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import `benchmarks.peers` from the checkout, not siblings
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from rocksdict import Options, Rdict

from benchmarks.peers._common import Progress, consumer_settings, peer_arguments, producer_settings


def naive_loop(
    bootstrap: str, input_topic: str, output_topic: str, data_dir: str, max_seconds: float, group: str = ""
) -> Progress:
    group = group or f"bench-naive-{output_topic}"
    consumer = Consumer(consumer_settings(bootstrap, group))
    producer = Producer(producer_settings(bootstrap, **{"transactional.id": group}))
    producer.init_transactions(30)
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    store = Rdict(data_dir, options=options)
    consumer.subscribe([input_topic])
    progress, deadline = Progress(), None
    while deadline is None or time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            if progress.consumed:
                break
            continue
        if message.error():
            if message.error().code() == KafkaError._PARTITION_EOF and progress.consumed:
                break
            continue
        if deadline is None:
            deadline = time.monotonic() + max_seconds
        progress.consumed_some(1)
        key = message.key() or json.loads(message.value())["messageId"].encode()  # a keyless event: its field
        producer.begin_transaction()
        new = store.get(key) is None
        if new:
            producer.produce(output_topic, message.value(), key, message.partition())
        producer.send_offsets_to_transaction(
            [TopicPartition(input_topic, message.partition(), message.offset() + 1)],
            consumer.consumer_group_metadata(),
        )
        producer.commit_transaction()
        progress.committed()
        progress.published += new
        store[key] = b"1"
    consumer.close()
    store.close()
    return progress


def main() -> None:
    parser = peer_arguments(__doc__, "data_dir")
    parser.add_argument("--group", default="", help="consumer group and transactional.id (default: per output)")
    parser.add_argument("--max-seconds", type=float, default=600)
    args = parser.parse_args()
    naive_loop(args.bootstrap, args.input_topic, args.output_topic, args.data_dir, args.max_seconds, args.group).emit()


if __name__ == "__main__":
    main()
