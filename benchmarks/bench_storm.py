"""A retry storm: ``dedupectl run`` on input whose duplicates are ids spread over the whole window of its stores.

    python benchmarks/bench_storm.py [--count 1000000] [--duplicates 0.3] [--small-ids 1000000]
        [--large-ids 100000000] [--repeat 3] [--large-dir DIR] [--without-sealed-arrays [--runs-dir DIR]] [--cold]
        [--out benchmarks/results/storm.json]

Two data directories are bulk loaded (``store.bulk_load``, as ``dedupectl rebuild`` makes a store), one holding
``--small-ids`` and one ``--large-ids`` ids in all, a quarter in each of 4 partitions' stores. Each is given its
own input of ``--count`` events on a broker of its own: the same new events, and a share of ``--duplicates``
that are ids its stores hold, drawn uniformly over every id of each partition's store (so over every generation
of the window, not only the recent ones a client's retries hit), each drawn once, produced to the partition
whose store holds it, among the new ones in the same order. ``dedupectl run`` then runs on a hard-linked copy of
each directory in turn, ``--repeat`` times, with the bound the bulk load sized each store's filter for (twice
the ids it holds: nothing ages). Every output is read back (read_committed): it must hold each new id once and
none of the duplicates. Throughput is from the first record consumed to the last transaction committed; the
large stores' median run is reported against the small stores'.

``--large-dir`` keeps the large bulk load between invocations (``bench_worker.py --prefilled-dir`` makes the
same one for topic ``in``: the two can share it).

``--without-sealed-arrays`` also bulk loads the large stores without sealed arrays (every generation a RocksDB
run, ``benchmarks/without_sealed_arrays.py``; kept in ``--runs-dir``) and runs the same storm on them each round,
on the large stores' broker: the large stores' median run is then also reported against theirs, which is what
the sealed arrays buy end to end.

``--cold`` drops the page cache before each run (root only): each worker starts as after its machine's restart,
its stores' files on disk only (the broker's log too).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bulk_stores import PREFILL_LAYOUT, bucket_ids, linked_copy, reuse_or_prefill  # noqa: E402
from dedupectl.config import KafkaConfig  # noqa: E402
from dedupectl.devbroker import LocalBroker  # noqa: E402
from dedupectl.kafka_clients import create_topics  # noqa: E402
from dedupectl.sample_events import SampleSpec, generate  # noqa: E402
from dedupectl.verify import check_output  # noqa: E402
from store.bulk_load import LoadLayout  # noqa: E402

console = Console()
PARTITIONS = 4
TOPIC = "in"  # the topic the bulk-loaded stores are of


def held_ids(
    partition: int, per_store: int, draws: int, rng: np.random.Generator, layout: LoadLayout = PREFILL_LAYOUT
) -> list[bytes]:
    """``draws`` distinct ids of one partition's bulk-loaded store, drawn uniformly over all it holds (the
    store's buckets of ``layout`` made again from their seeds, as ``bulk_stores.prefill_data_dir`` made them)."""
    positions = np.sort(rng.choice(per_store, size=draws, replace=False))
    chosen: list[bytes] = []
    bucket_size = layout.bucket_ids
    for bucket in range(-(-per_store // bucket_size)):
        low = bucket * bucket_size
        size = min(bucket_size, per_store - low)
        inside = positions[(positions >= low) & (positions < low + size)] - low
        if inside.size:
            chosen.extend(bytes(one) for one in bucket_ids(partition, bucket, size)[inside])
    return chosen


def storm_input(count: int, duplicates: float, per_store: int, seed: int) -> list[tuple[int, bytes, bytes]]:
    """``(partition, key, value)`` of the storm over stores of ``per_store`` ids each: the sample's new events
    (the same for every size) round robin over the partitions, and the held ids among them, each in a new
    event's body with its id swapped (both are ``ajs-`` + 32 hex digits)."""
    held_count = round(count * duplicates) // PARTITIONS
    new = list(generate(SampleSpec(count - held_count * PARTITIONS, duplicate_ratio=0.0)))
    rng = np.random.default_rng(seed)
    held = [held_ids(partition, per_store, held_count, rng) for partition in range(PARTITIONS)]
    order = random.Random(seed)
    storm = [
        (partition, key, new[at % len(new)].value.replace(new[at % len(new)].key, key))
        for at, (partition, key) in enumerate((p, key) for p in range(PARTITIONS) for key in held[p])
    ]
    order.shuffle(storm)
    total = len(new) + len(storm)
    storm_at = set(order.sample(range(total), len(storm)))
    fresh, retried = iter(enumerate(new)), iter(storm)
    events: list[tuple[int, bytes, bytes]] = []
    for slot in range(total):
        if slot in storm_at:
            events.append(next(retried))
        else:
            at, record = next(fresh)
            events.append((at % PARTITIONS, record.key, record.value))
    return events


def produce(kafka: KafkaConfig, events: list[tuple[int, bytes, bytes]]) -> None:
    producer = Producer(
        {**kafka.client_settings(), "linger.ms": 20, "batch.num.messages": 10_000, "enable.idempotence": True}
    )
    for partition, key, value in events:
        while True:
            try:
                producer.produce(TOPIC, value=value, key=key, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise SystemExit("the storm's events were not all delivered")


def run_worker(
    kafka: KafkaConfig,
    prefilled: Path,
    scratch: Path,
    name: str,
    max_keys: int,
    *,
    sealed_arrays: bool = True,
    cold: bool = False,
) -> dict:
    output = f"out-{name}"
    create_topics(kafka, [output], PARTITIONS)
    data_dir = scratch / f"data-{name}"
    linked_copy(prefilled, data_dir)
    if cold:
        drop_page_cache()
    program = ["-m", "dedupectl.cli.app"] if sealed_arrays else [str(ROOT / "benchmarks/without_sealed_arrays.py")]
    command = [sys.executable, *program, "run", "-b", kafka.bootstrap_servers, "-t", TOPIC]
    command += ["-o", output, "-d", str(data_dir), "--worker-id", f"storm-{name}", "--group-id", f"storm-{name}"]
    command += ["--exit-on-idle", "3", "--log-level", "warning", "--json", "--max-keys", str(max_keys)]
    completed = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    shutil.rmtree(data_dir, ignore_errors=True)
    if completed.returncode != 0:
        raise SystemExit(f"dedupectl run failed ({completed.returncode}):\n{completed.stderr[-2000:]}")
    run = json.loads(completed.stdout)
    return {
        "consumed": run["consumed"],
        "busy_seconds": run["busy_seconds"],
        "peak_rss_mb": run["peak_rss_mb"],
        "messages_per_second": round(run["consumed"] / run["busy_seconds"], 1),
        "output": output,
    }


def drop_page_cache() -> None:
    """Write dirty pages back, then drop the clean ones from the page cache."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError as error:
        raise SystemExit(f"--cold needs to write /proc/sys/vm/drop_caches (root): {error}") from None


def _median(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda run: run["messages_per_second"])[(len(runs) - 1) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--duplicates", type=float, default=0.3)
    parser.add_argument("--small-ids", type=int, default=1_000_000)
    parser.add_argument("--large-ids", type=int, default=100_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--large-dir", type=Path, help="where to keep the large bulk load between invocations")
    parser.add_argument(
        "--without-sealed-arrays",
        action="store_true",
        help="also run on the large stores loaded without sealed arrays (every generation a RocksDB run)",
    )
    parser.add_argument("--runs-dir", type=Path, help="where to keep that bulk load between invocations")
    parser.add_argument("--cold", action="store_true", help="drop the page cache before each run (root only)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/storm.json")
    args = parser.parse_args()
    sizes = {"small": args.small_ids, "large": args.large_ids}
    if args.without_sealed_arrays:
        sizes["runs"] = args.large_ids  # the large stores' ids, on the large stores' broker
    broker_of = {"small": "small", "large": "large", "runs": "large"}

    with tempfile.TemporaryDirectory(prefix="dedupectl-storm-") as scratch_name:
        scratch = Path(scratch_name)
        dirs = {
            "small": scratch / "small",
            "large": args.large_dir or scratch / "large",
            "runs": args.runs_dir or scratch / "runs",
        }
        load_seconds = {}
        for size, ids in sizes.items():
            kind = " without sealed arrays" if size == "runs" else ""
            with console.status(f"bulk loading {ids:,} ids into {PARTITIONS} stores{kind}"):
                load_seconds[size] = reuse_or_prefill(dirs[size], TOPIC, PARTITIONS, ids, sealed_arrays=size != "runs")
        with LocalBroker(scratch / "broker-small") as small, LocalBroker(scratch / "broker-large") as large:
            brokers = {"small": KafkaConfig(small.bootstrap_servers), "large": KafkaConfig(large.bootstrap_servers)}
            for size, kafka in brokers.items():
                create_topics(kafka, [TOPIC, f"{TOPIC}.dead-letter"], PARTITIONS)
                with console.status(f"producing the storm over the {size} stores"):
                    events = storm_input(args.count, args.duplicates, sizes[size] // PARTITIONS, seed=11)
                    produce(kafka, events)
            runs: dict[str, list[dict]] = {size: [] for size in sizes}
            for round_ in range(args.repeat):
                # alternated, in reverse every other round: a burst of load elsewhere, or a drift within the
                # invocation, hits every kind of store alike
                for size in list(sizes)[:: -1 if round_ % 2 else 1]:
                    # the bound the bulk load sized each filter for (another rebuilds it at the first lookup);
                    # it holds what the stores have and the run's ids: nothing ages
                    max_keys = sizes[size] // PARTITIONS * 2
                    kafka = brokers[broker_of[size]]
                    with console.status(f"round {round_ + 1}/{args.repeat}: dedupectl run on the {size} stores"):
                        run = run_worker(
                            kafka,
                            dirs[size],
                            scratch,
                            f"{size}-{round_}",
                            max_keys,
                            sealed_arrays=size != "runs",
                            cold=args.cold,
                        )
                    run["check"] = check_output(kafka, run.pop("output"), new_ids(args))
                    runs[size].append(run)
    report_and_exit(args, sizes, load_seconds, runs)


def new_ids(args: argparse.Namespace) -> set[bytes]:
    """The ids of the storm's new events: every output must hold each once, and nothing else."""
    held = round(args.count * args.duplicates) // PARTITIONS * PARTITIONS
    return {record.key for record in generate(SampleSpec(args.count - held, duplicate_ratio=0.0))}


def report_and_exit(args: argparse.Namespace, sizes: dict, load_seconds: dict, runs: dict[str, list[dict]]) -> None:
    checks = [run.pop("check") for size_runs in runs.values() for run in size_runs]
    medians = {size: _median(size_runs) for size, size_runs in runs.items()}
    ratio = medians["large"]["messages_per_second"] / medians["small"]["messages_per_second"]
    with_arrays = None
    if "runs" in medians:
        with_arrays = medians["large"]["messages_per_second"] / medians["runs"]["messages_per_second"]
    table = Table(title=f"a retry storm: {args.count:,} events, {args.duplicates:.0%} of them held ids")
    for column in ("stores holding", "messages/s (median)", "runs", "peak RSS MB"):
        table.add_column(column, justify="right")
    for size, median in medians.items():
        table.add_row(
            f"{sizes[size]:,} ids" + (", no sealed arrays" if size == "runs" else ""),
            f"{median['messages_per_second']:,.0f}",
            ", ".join(f"{run['messages_per_second']:,.0f}" for run in runs[size]),
            f"{median['peak_rss_mb']:.0f}",
        )
    console.print(table)
    console.print(f"large ÷ small: {ratio:.2f}x (median runs)")
    if with_arrays is not None:
        console.print(f"large ÷ large without sealed arrays: {with_arrays:.2f}x (median runs)")
    bad = [check for check in checks if not check.exactly_once]
    console.print(
        f"output check: {len(checks) - len(bad)}/{len(checks)} runs held each new id once and no held id"
        + ("" if not bad else f"; first failure: {bad[0].__dict__}")
    )
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "count": args.count,
        "duplicate_ratio": args.duplicates,
        "cold": args.cold,
        "sizes": sizes,
        "load_seconds": load_seconds,
        "runs": runs,
        "large_vs_small": ratio,
        "large_vs_large_without_sealed_arrays": with_arrays,
        "output_checks": [check.__dict__ for check in checks],
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    console.print(f"written to {args.out}")
    if bad:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
