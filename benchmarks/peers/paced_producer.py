"""The latency run's load: the sample events at a fixed rate, each carrying the moment it was sent.

Prepares ``--rate * --seconds`` Segment-like events (the benchmark's generator: ids, duplicates and sizes
as in the throughput runs), prints ``ready``, waits for a line on stdin, then sends them paced evenly over
``--seconds`` (the records due by now, every millisecond) and prints one JSON object: how many it sent, when,
and how far behind its schedule it fell. Each record's timestamp is its send time (ms), and its JSON value
ends with a ``"benchSentUs"`` field holding the same moment in microseconds (every system under test passes
the value through unchanged, not every one keeps the timestamp): ``sent_us`` reads it back.

    python benchmarks/peers/paced_producer.py BOOTSTRAP TOPIC --rate 10000 --seconds 60 [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import `benchmarks.peers` from the checkout, not siblings
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from confluent_kafka import Producer

from dedupectl.sample_events import SampleSpec, generate

TICK_SECONDS = 0.001
SENT_FIELD = b',"benchSentUs":'


def stamp(value: bytes, sent_us: int) -> bytes:
    """A JSON object value with the send time (µs since the epoch) added as its last field."""
    return b"%s%s%d}" % (value[:-1], SENT_FIELD, sent_us)


def sent_us(value: bytes | None) -> int | None:
    """The send time ``stamp`` put in a value, or None if it has none."""
    at = value.rfind(SENT_FIELD) if value else -1
    if at < 0:
        return None
    start = at + len(SENT_FIELD)
    try:
        return int(value[start : value.index(b"}", start)])
    except ValueError:
        return None


def producer_settings(bootstrap: str) -> dict[str, object]:
    # a short linger: the load's own batching is part of every system's latency alike, kept small
    return {"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all", "enable.idempotence": True,
            "queue.buffering.max.messages": 1_000_000}  # fmt: skip


def paced_send(producer: Producer, topic: str, records: list[tuple[bytes, bytes]], rate: float) -> dict[str, float]:
    """Send ``records`` (key, value) at ``rate`` per second; what was sent, over how long, how late at worst."""
    started = time.monotonic()
    first_sent_at = time.time()
    sent, most_behind = 0, 0.0
    while sent < len(records):
        now = time.monotonic()
        due = min(len(records), int((now - started) * rate) + 1)
        most_behind = max(most_behind, (due - 1 - sent) / rate)  # records overdue when this tick began
        while sent < due:
            key, value = records[sent]
            sent_us = time.time_ns() // 1000
            try:
                producer.produce(topic, stamp(value, sent_us), key, timestamp=sent_us // 1000)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(max(started + sent / rate - time.monotonic(), TICK_SECONDS))
    last_sent_at = time.time()
    unsent = producer.flush(60)
    return {
        "sent": sent - unsent,
        "first_sent_at": first_sent_at,
        "last_sent_at": last_sent_at,
        "seconds": round(last_sent_at - first_sent_at, 3),
        "rate": round(sent / max(last_sent_at - first_sent_at, 1e-9), 1),
        "most_behind_ms": round(most_behind * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("--rate", type=float, required=True, help="records per second")
    parser.add_argument("--seconds", type=float, required=True, help="how long the load lasts")
    parser.add_argument("--duplicates", type=float, default=0.006)
    parser.add_argument("--id-style", choices=["ajs", "uuid"], default="ajs")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    spec = SampleSpec(round(args.rate * args.seconds), args.duplicates, id_style=args.id_style, seed=args.seed)
    records = [(record.key, record.value) for record in generate(spec)]
    producer = Producer(producer_settings(args.bootstrap))
    producer.list_topics(args.topic, timeout=30)  # connected, the partitions' leaders known: no late first sends
    print("ready", flush=True)
    if not sys.stdin.readline():
        raise SystemExit("stdin closed before the start")
    print(json.dumps(paced_send(producer, args.topic, records, args.rate)), flush=True)


if __name__ == "__main__":
    main()
