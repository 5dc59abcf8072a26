"""``dedupectl repartition`` on the project's local broker and Spark on ``local[2]``: the build's rate and the
stall at cutover.

    python benchmarks/bench_repartition.py [--ids 1000000] [--old 4] [--new 8]

Publishes ``--ids`` distinct ids, keyed by themselves, to an output topic of ``--old`` partitions, each in the
partition librdkafka's default partitioner (CRC32) gives its key: what the workers would have published.
Then:

- build: ``dedupectl repartition build`` to ``--new`` partitions (the SparkSession and its Python workers are
  started first and not timed). The rate is ids numbered per second over the whole build (read, numbering,
  the new partitions' SST files and ingest).
- stall: with a producer sending new ids to the input (its metadata refreshed every 500 ms) and no worker
  running, ``dedupectl repartition cutover``, then a worker (in this process, as ``dedupectl run`` with
  ``--partitioner crc32 --misrouted forward``) is started at once. The stall is the time from the start of the
  cutover until the first record is published to a new output partition (index ``--old`` or above), split
  into the cutover itself and the worker's start up to that record. The group is empty before the cutover,
  so the cutover's wait for stopped static members to leave is not in it: add the workers'
  ``session_timeout_ms`` where workers were stopped just before.

Prints a table and writes benchmarks/results/repartition.json. Timings on a machine shared with other jobs are
noisy: the load average is recorded with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dedupectl.config import KafkaConfig, resolve_worker_config  # noqa: E402
from dedupectl.devbroker import LocalBroker  # noqa: E402
from dedupectl.kafka_clients import create_topics  # noqa: E402
from dedupectl.partitioner import crc32_partition  # noqa: E402
from dedupectl.repartition.cutover import CutoverRequest, cutover  # noqa: E402
from dedupectl.spark.repartition import BuildRequest, run_build  # noqa: E402
from dedupectl.spark.session import SparkSettings, preflight, spark_session  # noqa: E402
from dedupectl.worker import Worker  # noqa: E402

console = Console()
INPUT, OUTPUT = "bench-in", "bench-out"
SESSION_TIMEOUT_MS = 6000


def publish_output(kafka: KafkaConfig, ids: int, partitions: int) -> None:
    """The output the old layout's workers would have published: each id once, in its CRC32 partition."""
    producer = Producer(
        {**kafka.client_settings(), "linger.ms": 50, "batch.num.messages": 20_000, "compression.type": "lz4"}
    )
    for number in range(ids):
        key = f"ajs-{number:032x}".encode()
        value = b'{"messageId": "%s"}' % key
        while True:
            try:
                producer.produce(OUTPUT, value=value, key=key, partition=crc32_partition(key, partitions))
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(300) == 0


def keep_producing(kafka: KafkaConfig, stop: threading.Event) -> None:
    """New ids to the input, about 1,000 a second, until stopped."""
    producer = Producer({**kafka.client_settings(), "linger.ms": 5, "topic.metadata.refresh.interval.ms": 500})
    number = 0
    while not stop.is_set():
        key = f"new-{number:09d}".encode()
        producer.produce(INPUT, value=b'{"messageId": "%s"}' % key, key=key)
        producer.poll(0)
        number += 1
        time.sleep(0.001)
    producer.flush(30)


def first_new_partition_record(kafka: KafkaConfig, old: int, new: int, timeout_s: float = 300) -> float:
    """Poll the new output partitions' last stable offsets until one is past 0; when that was seen."""
    consumer = Consumer({**kafka.client_settings(), "group.id": "bench-probe", "isolation.level": "read_committed"})
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for partition in range(old, new):
                try:
                    _, end = consumer.get_watermark_offsets(TopicPartition(OUTPUT, partition), timeout=5)
                except KafkaException:  # the new partitions exist once the cutover has added them
                    continue
                if end > 0:
                    return time.monotonic()
            time.sleep(0.02)
    finally:
        consumer.close()
    raise AssertionError("no record reached a new output partition")


def bench(args: argparse.Namespace, scratch: Path, kafka: KafkaConfig) -> dict:
    data_dir = scratch / "data"
    create_topics(kafka, [INPUT, OUTPUT, f"{INPUT}.dead-letter"], args.old)
    started = time.monotonic()
    publish_output(kafka, args.ids, args.old)
    console.print(f"published {args.ids:,} ids in {time.monotonic() - started:.0f}s")
    settings = SparkSettings(master=args.master, app_name="dedupectl-bench")
    with spark_session(settings, preflight(settings)) as (spark, _info):
        spark.range(1).count()  # JVM warm-up, not timed
        request = BuildRequest(kafka, INPUT, OUTPUT, data_dir, args.new, partitioner="crc32")
        report = run_build(spark, request)
    build = {
        "seconds": round(report.seconds, 2),
        "seconds_ordering": round(report.seconds_ordering, 2),
        "ids": sum(store.ids for store in report.stores),
        "ids_per_second": round(report.ids_per_second),
    }
    stop = threading.Event()
    producer = threading.Thread(target=keep_producing, args=(kafka, stop), daemon=True)
    producer.start()
    time.sleep(2)
    config = resolve_worker_config(
        env={},
        flags={
            "bootstrap_servers": kafka.bootstrap_servers,
            "input_topic": INPUT,
            "output_topic": OUTPUT,
            "data_dir": data_dir,
            "worker_id": "bench",
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "partitioner": "crc32",
            "misrouted": "forward",
        },
    )
    cutover_started = time.monotonic()
    done = cutover(CutoverRequest(kafka, INPUT, OUTPUT, data_dir, config.group_id, SESSION_TIMEOUT_MS))
    cutover_done = time.monotonic()
    worker_stop = threading.Event()
    worker = threading.Thread(target=lambda: Worker(config).run(worker_stop), daemon=True)
    worker.start()
    first = first_new_partition_record(kafka, args.old, args.new)
    worker_stop.set()
    stop.set()
    worker.join(120)
    producer.join(60)
    return {
        "build": build,
        "stall": {
            "seconds": round(first - cutover_started, 2),
            "seconds_cutover": round(cutover_done - cutover_started, 2),
            "seconds_worker_to_first_publish": round(first - cutover_done, 2),
            "cutover_reported_seconds": round(done.seconds, 2),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--old", type=int, default=4)
    parser.add_argument("--new", type=int, default=8)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/repartition.json")
    args = parser.parse_args()
    results: dict = {
        "ids": args.ids,
        "partitions": [args.old, args.new],
        "master": args.master,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load_average_before": os.getloadavg(),
    }
    with (
        tempfile.TemporaryDirectory(prefix="dedupectl-bench-repartition-") as scratch_name,
        LocalBroker(Path(scratch_name) / "broker", heap_mb=1024) as broker,
    ):
        kafka = KafkaConfig(broker.bootstrap_servers, timeout_s=60)
        results |= bench(args, Path(scratch_name), kafka)
    results["load_average_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    table = Table(title=f"repartition {args.old} -> {args.new}, {args.ids:,} ids, {args.master}")
    for column in ("measure", "value"):
        table.add_column(column)
    build, stall = results["build"], results["stall"]
    table.add_row("build", f"{build['seconds']} s ({build['seconds_ordering']} s reading and numbering)")
    table.add_row("build rate", f"{build['ids_per_second']:,} ids/s")
    table.add_row("stall: cutover start to first new-partition record", f"{stall['seconds']} s")
    table.add_row("  of which the cutover", f"{stall['seconds_cutover']} s")
    table.add_row("  of which the worker's start to that record", f"{stall['seconds_worker_to_first_publish']} s")
    console.print(table)


if __name__ == "__main__":
    main()
