"""Reconcile throughput against a plain read_committed consume of the same records, and its memory.

    python benchmarks/bench_reconcile.py [--records 5000000] [--small 1000000] [--jobs-records 1000000]

On the project's local broker: produces ``--records`` keyed records (``ajs-`` + 32 hex ids, ~200-byte
values; plain linger'd producer, no transactions, for speed) to a one-partition output topic, and records
the same ids in order in a dedup store (``DedupStore.record`` in 100k batches), as the worker would have.
Then, each in its own process (for a fair peak RSS), best of ``--repeat``:

- ``consume``: a plain read_committed consume of the partition with the scanner's consumer settings,
  touching each record's key: the floor;
- ``reconcile``: ``dedupectl reconcile`` (dry run, secondary store) over the same records; the target is at
  least 0.7x the consume rate;
- ``reconcile`` over the first ``--small`` records: peak RSS must stay flat as the range grows 5x.

Each run also reports its process CPU seconds, and a reconcile the wall and CPU time of its lookup thread
(the stage that checks each group against the store). Then, without Kafka, that stage alone over the whole
store: groups checked by the store's batch digests (reconcile's first way), against every id looked up in
key order (its way when the digests do not show a run). Then ``--jobs 1``
against ``--jobs 2`` on a two-partition topic of ``--jobs-records`` records per partition. Prints tables and
writes benchmarks/results/reconcile.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import KafkaError, Producer, TopicPartition  # noqa: E402

from dedupectl.config import KafkaConfig  # noqa: E402
from dedupectl.devbroker import LocalBroker  # noqa: E402
from dedupectl.kafka_clients import create_topics  # noqa: E402
from reconcile.kafka import make_consumer  # noqa: E402
from reconcile.runner import ReconcileRequest, run_reconcile  # noqa: E402
from reconcile.scan import SCAN_CONSUMER_SETTINGS  # noqa: E402
from store import clock  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402
from store.layout import store_path  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 140)  # a wide table, also in logs
INPUT = "bench-in"  # names the stores; the input topic itself is not needed
VALUE = (b'{"type":"track","event":"Order Completed","userId":"user-4711","properties":{"revenue":12.5},' * 3)[:200]


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM). Not ru_maxrss: Linux carries that across exec from the forking
    parent, which holds millions of ids here."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


# -- set-up -------------------------------------------------------------------------------------------


def make_ids(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [f"ajs-{rng.getrandbits(128):032x}".encode() for _ in range(count)]


def produce(kafka: KafkaConfig, topic: str, partition: int, ids: list[bytes]) -> None:
    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "lz4",
        }
    )
    for index, message_id in enumerate(ids):
        while True:
            try:
                producer.produce(topic, VALUE, message_id, partition)
                break
            except BufferError:
                producer.poll(0.05)
        if index % 20_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("records were not delivered")


def fill_store(data_dir: Path, partition: int, ids: list[bytes], output_offset: int) -> None:
    now = clock.now_ms()
    with DedupStore.open(store_path(data_dir, INPUT, partition), topic=INPUT, partition=partition) as store:
        store.prepare_filter()  # a worker makes it at its first lookup and saves it beside the store
        for start in range(0, len(ids), 100_000):
            chunk = ids[start : start + 100_000]
            store.record(chunk, [now] * len(chunk), output_offset=output_offset)
        store.wait_for_seals()  # sealed generations in their arrays, as a running worker's are soon after
        store.flush()


# -- the measured runs (child processes) ------------------------------------------------------------


def child_consume(bootstrap: str, topic: str) -> dict:
    """The whole partition to its end, as cheaply as Python can: take each record's key, count it."""
    consumer = make_consumer(KafkaConfig(bootstrap), **SCAN_CONSUMER_SETTINGS)
    consumer.assign([TopicPartition(topic, 0, 0)])
    records, started, cpu, done = 0, time.monotonic(), time.process_time(), False
    while not done:
        for message in consumer.consume(10_000, 0.05):
            key = message.key()
            if key is None and message.error() is not None:
                done = done or message.error().code() == KafkaError._PARTITION_EOF
                continue
            records += 1
    seconds, cpu = time.monotonic() - started, time.process_time() - cpu
    consumer.close()
    return {
        "records": records,
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mb": peak_rss_mb(),
    }


def time_lookups() -> dict[str, float]:
    """Wrap reconcile's group lookup (this child process only) to add up its wall and thread CPU time."""
    import reconcile.lookup

    spent = {"lookup_seconds": 0.0, "lookup_cpu_seconds": 0.0}
    look_up_group = reconcile.lookup.look_up_group

    def timed(store, batches):
        started, cpu = time.monotonic(), time.thread_time()
        try:
            return look_up_group(store, batches)
        finally:
            spent["lookup_seconds"] += time.monotonic() - started
            spent["lookup_cpu_seconds"] += time.thread_time() - cpu

    reconcile.lookup.look_up_group = timed
    return spent


def child_reconcile(bootstrap: str, topic: str, data_dir: str, stop: int, partitions: int, jobs: int) -> dict:
    from reconcile.ranges import Bound

    spent = time_lookups()

    request = ReconcileRequest(
        kafka=KafkaConfig(bootstrap),
        input_topic=INPUT,
        output_topic=topic,
        data_dir=Path(data_dir),
        partitions=tuple(range(partitions)),
        stop=Bound(str(stop), offset=stop),
        jobs=jobs,
    )
    started, cpu = time.monotonic(), time.process_time()
    report = run_reconcile(request)
    seconds, cpu = time.monotonic() - started, time.process_time() - cpu
    differences = sum(p.missing_from_store + p.unpublished + p.duplicate_records for p in report.partitions)
    return {
        "records": report.records_scanned,
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 2),
        **{name: round(value, 2) for name, value in spent.items()},
        "peak_rss_mb": peak_rss_mb(),
        "differences": differences,
        "exit_code": report.exit_code,
    }


def child_lookups(data_dir: str, records: int) -> dict:
    """The store's ids in output order checked without Kafka, in reconcile's groups of 200,000: by the batch
    digests (reconcile's first way), and by key-ordered lookups of every id (its way when digests do not
    show a run). CPU seconds of this single-threaded process."""
    import reconcile.lookup as lookup

    ids = make_ids(records, seed=1)  # the same ids, in the same order, as the output topic holds
    figures = {}
    with DedupStore.open_secondary(store_path(Path(data_dir), INPUT, 0)) as store:
        for name, by_digests in (("digest_groups", lookup.run_by_digests), ("key_ordered_groups", None)):
            lookup.run_by_digests = by_digests or (lambda store, keys: None)
            started = time.process_time()
            for start in range(0, records, lookup.GROUP_RECORDS):
                if lookup.look_up_group(store, [ids[start : start + lookup.GROUP_RECORDS]]).run_start is None:
                    raise SystemExit("the store does not hold the ids in order")
            figures[name] = time.process_time() - started
    return {
        name: {
            "cpu_seconds": round(cpu, 2),
            "us_per_id": round(cpu / records * 1e6, 2),
            "ids_per_second": round(records / cpu),
        }
        for name, cpu in figures.items()
    }


def reconcile_in_child(bootstrap: str, topic: str, data_dir: Path, stop: int, partitions: int, jobs: int) -> dict:
    return run_child("reconcile", bootstrap, topic, str(data_dir), str(stop), str(partitions), str(jobs))


def run_child(*args: str) -> dict:
    completed = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise SystemExit(f"child {args[:2]} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout)


def best(runs: list[dict]) -> dict:
    chosen = min(runs, key=lambda run: run["seconds"])
    return {**chosen, "records_per_second": round(chosen["records"] / chosen["seconds"], 1), "all_seconds": [
        run["seconds"] for run in runs
    ]}  # fmt: skip


# -- main ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--small", type=int, default=1_000_000)
    parser.add_argument("--jobs-records", type=int, default=1_000_000, help="per partition, for --jobs 1 vs 2")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/reconcile.json")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, *rest = args.child
        if mode == "consume":
            result = child_consume(rest[0], rest[1])
        elif mode == "lookups":
            result = child_lookups(rest[0], int(rest[1]))
        else:
            result = child_reconcile(rest[0], rest[1], rest[2], int(rest[3]), int(rest[4]), int(rest[5]))
        json.dump(result, sys.stdout)
        return

    with (
        tempfile.TemporaryDirectory(prefix="dedupectl-bench-reconcile-") as scratch,
        LocalBroker(Path(scratch) / "broker") as broker,
    ):
        bootstrap = broker.bootstrap_servers
        kafka = KafkaConfig(bootstrap)
        data_dir = Path(scratch) / "data"
        create_topics(kafka, ["out-1"], 1)
        create_topics(kafka, ["out-2"], 2)
        with console.status(f"producing {args.records:,} records and recording them in a store"):
            started = time.monotonic()
            ids = make_ids(args.records, seed=1)
            produce(kafka, "out-1", 0, ids)
            fill_store(data_dir, 0, ids, output_offset=args.records)
            del ids
        console.print(f"set up {args.records:,} records in {time.monotonic() - started:.0f}s")

        results: dict[str, dict] = {}
        consume_runs, reconcile_runs, small_runs = [], [], []
        for attempt in range(args.repeat):
            with console.status(f"round {attempt + 1}/{args.repeat}: plain consume, reconcile {args.records:,}"):
                consume_runs.append(run_child("consume", bootstrap, "out-1"))
                reconcile_runs.append(reconcile_in_child(bootstrap, "out-1", data_dir, args.records, 1, 1))
            with console.status(f"round {attempt + 1}/{args.repeat}: reconcile {args.small:,}"):
                small_runs.append(reconcile_in_child(bootstrap, "out-1", data_dir, args.small, 1, 1))
        results["consume"] = best(consume_runs)
        results["reconcile"] = best(reconcile_runs)
        results["reconcile_small"] = best(small_runs)
        with console.status(f"lookups alone over {args.records:,} ids"):
            lookups = run_child("lookups", str(data_dir), str(args.records))

        with console.status(f"two partitions of {args.jobs_records:,}: --jobs 1 vs --jobs 2"):
            ids = make_ids(2 * args.jobs_records, seed=2)
            for partition in (0, 1):
                part = ids[partition * args.jobs_records : (partition + 1) * args.jobs_records]
                produce(kafka, "out-2", partition, part)
            jobs_dir = Path(scratch) / "data-2"
            for partition in (0, 1):
                part = ids[partition * args.jobs_records : (partition + 1) * args.jobs_records]
                fill_store(jobs_dir, partition, part, output_offset=args.jobs_records)
            del ids
            jobs1, jobs2 = [], []
            for _ in range(args.repeat):
                jobs1.append(reconcile_in_child(bootstrap, "out-2", jobs_dir, args.jobs_records, 2, 1))
                jobs2.append(reconcile_in_child(bootstrap, "out-2", jobs_dir, args.jobs_records, 2, 2))
        results["jobs_1"] = best(jobs1)
        results["jobs_2"] = best(jobs2)

    floor = results["consume"]["records_per_second"]
    ratio = results["reconcile"]["records_per_second"] / floor
    rss_growth = results["reconcile"]["peak_rss_mb"] / results["reconcile_small"]["peak_rss_mb"]
    jobs_speedup = results["jobs_2"]["records_per_second"] / results["jobs_1"]["records_per_second"]
    table = Table(title=f"dedupectl reconcile, {args.records:,} records (best of {args.repeat}; shared 2-core machine)")
    columns = ("run", "records", "seconds", "records/s", "÷ plain consume", "CPU s", "lookup s (CPU)", "peak RSS MB")
    for column in columns:
        table.add_column(column, justify="left" if column == "run" else "right")
    labels = {
        "consume": "plain read_committed consume",
        "reconcile": "reconcile (dry run)",
        "reconcile_small": f"reconcile, first {args.small:,}",
        "jobs_1": "2 partitions, --jobs 1",
        "jobs_2": "2 partitions, --jobs 2",
    }
    for name, figures in results.items():
        table.add_row(
            labels[name],
            f"{figures['records']:,}",
            f"{figures['seconds']:.2f}",
            f"{figures['records_per_second']:,.0f}",
            f"{figures['records_per_second'] / floor:.2f}x",
            f"{figures['cpu_seconds']:.1f}",
            f"{figures['lookup_seconds']:.1f} ({figures['lookup_cpu_seconds']:.1f})"
            if "lookup_seconds" in figures
            else "",
            f"{figures['peak_rss_mb']:.0f}",
        )
    console.print(table)
    stage = Table(title=f"lookups alone, {args.records:,} ids of the store in output order (no Kafka, one thread)")
    for column in ("how", "CPU s", "us per id", "ids/s"):
        stage.add_column(column, justify="left" if column == "how" else "right")
    for name, label in (("digest_groups", "groups of 200,000 by batch digests (reconcile)"),
                        ("key_ordered_groups", "groups of 200,000, every id looked up in key order")):  # fmt: skip
        figures = lookups[name]
        stage.add_row(
            label, f"{figures['cpu_seconds']:.1f}", f"{figures['us_per_id']:.2f}", f"{figures['ids_per_second']:,}"
        )
    console.print(stage)
    console.print(
        f"reconcile / plain consume: {ratio:.2f}x (target >= 0.7); peak RSS {args.records:,} vs {args.small:,}: "
        f"{rss_growth:.2f}x (flat = ~1.0); --jobs 2 vs 1: {jobs_speedup:.2f}x"
    )
    summary = {
        "records": args.records,
        "small": args.small,
        "results": results,
        "lookups_alone": lookups,
        "reconcile_over_consume": round(ratio, 3),
        "peak_rss_ratio_large_over_small": round(rss_growth, 3),
        "jobs2_over_jobs1": round(jobs_speedup, 3),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "shared": True},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
