"""The Spark jobs against their baselines, on the project's local broker and Spark on ``local[2]``.

    python benchmarks/bench_spark.py [--records 5000000] [--only audit|rebuild]

Produces ``--records`` Segment-like events (0.6% duplicates) to a one-partition input topic and the first
occurrence of each id, keyed by it, to a one-partition output topic (what the worker would publish). Then:

- audit: ``dedupectl audit`` over both whole topics on local[2] (the SparkSession and its Python workers are
  started first and not timed), against the same check in one Python process (a librdkafka consumer per
  topic, the worker's ``extract_id`` per input record, counters). Throughput is records read (input + output)
  per second.
- rebuild: ``dedupectl rebuild`` of the partition's store (about ``--records`` ids) by SST ingest, in its
  timed phases (reading and numbering the ids; handing them over to the SST writers; writing the SST files;
  ingesting them), against two baselines in the same run:
  * the store's normal write path: the same ids, in the same order, with their timestamps, already in a
    Python list (read from the output beforehand, not timed), through ``DedupStore.record`` in calls of
    5,000 ids (the worker's batch size), then ``flush``;
  * the worker's recovery (``catch_up``) into an empty store, which reads the output topic as well.
  The headline figure compares the store-building parts: SST files + ingest (from the numbered ids on the
  executors' disk, as the hand-over left them: one folder per bucket, each file sorted by id) against the
  write path (from the ids in a list). The output also gives the hand-over + SST + ingest ratio and the whole
  rebuild (from the topic) against recovery (from the topic). The rebuilt store is checked against the
  recorded one, and both stores' SST bytes per id are reported.

Prints tables and writes benchmarks/results/spark.json. Timings on a machine shared with other jobs are
noisy: the load average is recorded with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from contextlib import suppress
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dedupectl.config import KafkaConfig  # noqa: E402
from dedupectl.devbroker import LocalBroker  # noqa: E402
from dedupectl.kafka_clients import create_topics  # noqa: E402
from dedupectl.messages import DeadLetter, extract_id  # noqa: E402
from dedupectl.sample_events import SampleSpec, generate  # noqa: E402
from dedupectl.spark.audit import AuditRequest, run_audit  # noqa: E402
from dedupectl.spark.rebuild import RebuildRequest, run_rebuild  # noqa: E402
from dedupectl.spark.session import SparkSettings, preflight, spark_session  # noqa: E402
from dedupectl.spark.sources import TopicSource  # noqa: E402
from reconcile.recovery import catch_up  # noqa: E402
from reconcile.scan import OutputReader  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402
from store.layout import store_path  # noqa: E402

console = Console()
INPUT, OUTPUT = "bench-in", "bench-out"
RECORD_BATCH = 5_000  # ids per DedupStore.record call: the worker's batch size


def produce_topics(kafka: KafkaConfig, records: int) -> dict:
    """The input sample, and its deduplicated output keyed by messageId."""
    producer = Producer(
        {
            **kafka.client_settings(),
            "linger.ms": 50,
            "batch.num.messages": 20_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "lz4",
        }
    )
    counts = Counter()
    for record in generate(SampleSpec(count=records)):
        for topic in (INPUT, OUTPUT) if record.kind == "new" else (INPUT,):
            while True:
                try:
                    producer.produce(topic, value=record.value, key=record.key, partition=0)
                    break
                except BufferError:
                    producer.poll(0.1)
            counts[topic] += 1
    assert producer.flush(300) == 0
    return {"input_records": counts[INPUT], "output_records": counts[OUTPUT]}


def python_check(kafka: KafkaConfig) -> dict:
    """The audit's question in one process: input ids by extract_id, output ids by key, compared."""
    started = time.monotonic()
    valid: set[bytes] = set()
    consumer = Consumer(
        {
            **kafka.client_settings(),
            "group.id": "bench-check",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.message.max.bytes": 16 * 1024 * 1024,
        }
    )
    records = 0
    consumer.assign([TopicPartition(INPUT, 0, 0)])
    done = False
    while not done:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error() is not None:
                done = message.error().code() == KafkaError._PARTITION_EOF
                continue
            records += 1
            with suppress(DeadLetter):
                valid.add(extract_id(message.key(), message.value(), "json", "messageId"))
    consumer.close()
    published: Counter[bytes] = Counter()
    with OutputReader(kafka) as reader:
        for batch in reader.scan(OUTPUT, 0, -1):
            published.update(batch.ids)
    seconds = time.monotonic() - started
    read = records + sum(published.values())
    return {
        "seconds": seconds,
        "records_read": read,
        "records_per_s": read / seconds,
        "losses": len(valid - set(published)),
        "duplicates": sum(1 for n in published.values() if n > 1),
    }


def bench_audit(spark, kafka: KafkaConfig, produced: dict) -> dict:
    started = time.monotonic()
    report = run_audit(spark, AuditRequest(input=TopicSource(INPUT), output=TopicSource(OUTPUT), kafka=kafka))
    seconds = time.monotonic() - started
    assert report.violations == 0, report
    read = report.total("input_records") + report.total("output_records")
    assert read == produced["input_records"] + produced["output_records"]
    console.print(f"audit: {read:,} records in {seconds:.1f}s; the Python check next")
    baseline = python_check(kafka)
    assert baseline["losses"] == 0 and baseline["duplicates"] == 0
    return {
        "spark": {
            "seconds": seconds,
            "records_read": read,
            "records_per_s": read / seconds,
            "distinct_ids": report.total("distinct_ids"),
        },
        "python_one_process": baseline,
        "ratio": (read / seconds) / baseline["records_per_s"],
    }


def _sst_bytes(store: Path) -> int:
    return sum(path.stat().st_size for path in store.glob("*.sst"))


def bench_rebuild(spark, kafka: KafkaConfig, scratch: Path) -> dict:
    data_dir = scratch / "rebuilt"
    request = RebuildRequest(kafka=kafka, input_topic=INPUT, output_topic=OUTPUT, partition=0, data_dir=data_dir)
    load_before = os.getloadavg()
    report = run_rebuild(spark, request)
    console.print(f"rebuild: {report.ids:,} ids in {report.seconds:.1f}s; recording them next")

    # the same ids in the same order, read beforehand: only DedupStore.record (the write path) is timed
    ids, stamps = [], []
    with OutputReader(kafka) as reader:
        for batch in reader.scan(OUTPUT, 0, -1):
            ids += batch.ids
            stamps += batch.timestamps_ms
    recorded_path = scratch / "recorded" / f"{INPUT}-0"
    started = time.monotonic()
    with DedupStore.open(recorded_path, topic=INPUT, partition=0) as store:
        for start in range(0, len(ids), RECORD_BATCH):
            store.record(ids[start : start + RECORD_BATCH], stamps[start : start + RECORD_BATCH])
        store.flush()
    record_seconds = time.monotonic() - started

    recovered_path = scratch / "recovered" / f"{INPUT}-0"
    started = time.monotonic()
    with DedupStore.open(recovered_path, topic=INPUT, partition=0) as store, OutputReader(kafka) as reader:
        catch_up(store, reader, OUTPUT, 0)
        store.flush()
    recovery_seconds = time.monotonic() - started

    rebuilt = store_path(data_dir, INPUT, 0)
    with DedupStore.open_secondary(rebuilt) as a, DedupStore.open_secondary(recorded_path) as b:
        assert a.state.next_seq == b.state.next_seq == len(ids)
        probe = ids[:: max(len(ids) // 10_000, 1)]
        assert a.lookup_many(probe) == b.lookup_many(probe)
    store_building = report.seconds_writing + report.seconds_ingesting
    after_numbering = report.seconds_handing_over + store_building
    return {
        "ids": report.ids,
        "files": report.files,
        "numbered_without_duplicates": report.without_duplicates,
        "record_batch_ids": RECORD_BATCH,
        "load_average_before_rebuild": load_before,
        "spark_rebuild": {
            "seconds": report.seconds,
            "ordering_seconds": report.seconds_ordering,
            "hand_over_seconds": report.seconds_handing_over,
            "sst_write_seconds": report.seconds_writing,
            "ingest_seconds": report.seconds_ingesting,
        },
        "record_write_path_seconds": record_seconds,
        "recovery_catch_up_seconds": recovery_seconds,
        "bytes_per_id": {
            "rebuilt_sst_files": report.sst_bytes / report.ids,
            "rebuilt_store": _sst_bytes(rebuilt) / report.ids,
            "recorded_store": _sst_bytes(recorded_path) / report.ids,
        },
        "ratio_store_building_vs_record": record_seconds / store_building,
        "ratio_after_numbering_vs_record": record_seconds / after_numbering,
        "ratio_rebuild_vs_recovery": recovery_seconds / report.seconds,
        "ratio_rebuild_vs_record": record_seconds / report.seconds,
    }


def _import_task_modules(_: int) -> int:
    import dedupectl.spark.extract
    import dedupectl.spark.rebuild_sst  # noqa: F401

    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--only", choices=("audit", "rebuild"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/spark.json")
    args = parser.parse_args()
    results: dict = {
        "records": args.records,
        "master": args.master,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load_average_before": os.getloadavg(),
    }
    with (
        tempfile.TemporaryDirectory(prefix="dedupectl-bench-spark-") as scratch_name,
        LocalBroker(Path(scratch_name) / "broker", heap_mb=1024) as broker,
    ):
        scratch = Path(scratch_name)
        kafka = KafkaConfig(broker.bootstrap_servers, timeout_s=60)
        create_topics(kafka, [INPUT, OUTPUT], 1)
        started = time.monotonic()
        results["produced"] = produce_topics(kafka, args.records)
        console.print(f"produced {results['produced']} in {time.monotonic() - started:.0f}s")
        settings = SparkSettings(master=args.master, app_name="dedupectl-bench")
        with spark_session(settings, preflight(settings)) as (spark, _info):
            spark.range(1).count()  # JVM warm-up, not timed
            # Python workers started, with the modules the jobs' tasks import: once per session, not timed
            tasks = spark.sparkContext.defaultParallelism
            spark.sparkContext.parallelize(range(tasks), tasks).map(_import_task_modules).collect()
            if args.only in (None, "audit"):
                results["audit"] = bench_audit(spark, kafka, results["produced"])
            if args.only in (None, "rebuild"):
                results["rebuild"] = bench_rebuild(spark, kafka, scratch)
    results["load_average_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    _print(results)


def _print(results: dict) -> None:
    if "audit" in results:
        audit = results["audit"]
        table = Table(title=f"audit over {audit['spark']['records_read']:,} records ({results['master']})")
        for column in ("", "seconds", "records/s"):
            table.add_column(column)
        ours = audit["spark"]
        table.add_row("dedupectl audit (Spark)", f"{ours['seconds']:.1f}", f"{ours['records_per_s']:,.0f}")
        base = audit["python_one_process"]
        table.add_row("one Python process", f"{base['seconds']:.1f}", f"{base['records_per_s']:,.0f}")
        table.add_row("ratio", "", f"{audit['ratio']:.2f}x")
        console.print(table)
    if "rebuild" in results:
        rebuild = results["rebuild"]
        spark_run = rebuild["spark_rebuild"]
        table = Table(title=f"rebuild of a {rebuild['ids']:,}-id store ({results['master']})")
        table.add_column("")
        table.add_column("seconds")
        table.add_row("rebuild 1. read the topic, number the ids (Spark)", f"{spark_run['ordering_seconds']:.1f}")
        table.add_row("rebuild 2. hand over, sorted by id (Spark)", f"{spark_run['hand_over_seconds']:.1f}")
        table.add_row("rebuild 3. write SST files (Python tasks)", f"{spark_run['sst_write_seconds']:.1f}")
        table.add_row("rebuild 4. ingest (driver)", f"{spark_run['ingest_seconds']:.2f}")
        table.add_row("rebuild: total", f"{spark_run['seconds']:.1f}")
        table.add_row(
            f"DedupStore.record, ids in a list, {rebuild['record_batch_ids']:,} per call",
            f"{rebuild['record_write_path_seconds']:.1f}",
        )
        table.add_row("worker recovery (catch_up), reading the topic", f"{rebuild['recovery_catch_up_seconds']:.1f}")
        console.print(table)
        sizes = rebuild["bytes_per_id"]
        lines = [
            "store building, SST files + ingest (3+4: from the numbered ids on the executors' disk as the hand-over"
            " left them, one folder per bucket, each file sorted by id; the sort is Spark's, in 2)"
            f" vs DedupStore.record (from the ids in a list): {rebuild['ratio_store_building_vs_record']:.2f}x",
            "everything after the numbering (2+3+4) vs DedupStore.record:"
            f" {rebuild['ratio_after_numbering_vs_record']:.2f}x",
            "whole rebuild (1-4, reads the topic) vs recovery (reads the topic):"
            f" {rebuild['ratio_rebuild_vs_recovery']:.2f}x;"
            f" vs DedupStore.record: {rebuild['ratio_rebuild_vs_record']:.2f}x",
            f"bytes per id: rebuilt store {sizes['rebuilt_store']:.1f} (its SST files as written"
            f" {sizes['rebuilt_sst_files']:.1f}), recorded store {sizes['recorded_store']:.1f}",
        ]
        console.print("\n".join(lines))
    console.print(f"load average before {results['load_average_before']}, after {results['load_average_after']}")


if __name__ == "__main__":
    main()
