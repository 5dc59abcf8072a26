"""Snapshots: checkpoint cost against store size, S3 transfer against plain boto3, and bringing a partition up
from a snapshot against rebuilding it from the output topic, every comparison measured in the same run.

    python benchmarks/bench_snapshots.py [--sizes 1000000,10000000] [--replay-ids 10000000] [--repeats 3]

1. checkpoint: stores of each size are built the way the worker records (batches of 20k ids); then, like a
   worker between batches, one more batch is recorded and a checkpoint taken (median of --repeats). Hard links
   plus a memtable flush: the figure should not grow with the store.
2. S3 (a moto server in its own process): the largest store's snapshot uploaded by ``S3Backend.publish`` and
   downloaded + checksum-verified by ``S3Backend.fetch``, against plain ``boto3`` ``upload_file`` /
   ``download_file`` of the same files one by one (no verification); best of --repeats, alternating.
3. bring-up: --replay-ids records are produced to an output partition on the local broker; "rebuild" is an empty
   store brought up by the worker's recovery (``catch_up``) over the whole partition; "snapshot" is restoring
   that store's snapshot (copy or download, verify every file) plus the same recovery, which then finds
   nothing new. Both end with the same ids.

Prints a table and writes benchmarks/results/snapshots.json. The machine is shared: expect timing noise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402

from dedupectl.config import KafkaConfig  # noqa: E402
from dedupectl.devbroker import LocalBroker  # noqa: E402
from dedupectl.kafka_clients import create_topics  # noqa: E402
from reconcile.recovery import catch_up  # noqa: E402
from reconcile.scan import OutputReader  # noqa: E402
from snapshots.backends import AwsOptions, LocalBackend, S3Backend  # noqa: E402
from snapshots.checkpoint import CheckpointFacts, take_checkpoint  # noqa: E402
from snapshots.create import build_manifest, create_snapshots  # noqa: E402
from snapshots.manifest import directory_bytes  # noqa: E402
from snapshots.progress import NO_PROGRESS  # noqa: E402
from snapshots.restore import restore_snapshot  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402
from store.layout import store_path  # noqa: E402

console = Console()
BATCH = 20_000
TOPIC = "bench-in"
VALUE = b'{"type":"track","event":"Order Completed","userId":"user-%07d","properties":{"revenue":12.50},' + (
    b'"context":{"library":"analytics.js"},"timestamp":"2026-11-22T12:00:00.000Z","messageId":"%s"}'
)


def message_id(n: int) -> bytes:
    return b"ajs-%032x" % ((n * 0x9E3779B97F4A7C15) & (2**128 - 1))


def build_store(path: Path, count: int) -> float:
    started = time.perf_counter()
    with DedupStore.open(path, topic=TOPIC, partition=0) as store:
        for offset in range(0, count, BATCH):
            ids = [message_id(n) for n in range(offset, min(offset + BATCH, count))]
            store.record(ids, [1_790_000_000_000 + n for n in range(offset, offset + len(ids))], output_offset=offset)
    return time.perf_counter() - started


def bench_checkpoints(scratch: Path, sizes: list[int], repeats: int) -> tuple[dict, tuple[CheckpointFacts, Path]]:
    results = {}
    largest = None
    for size in sizes:
        path = store_path(scratch / f"ckpt-{size}", TOPIC, 0)
        with console.status(f"building a store of {size:,} ids"):
            build_seconds = build_store(path, size)
        timings, next_id = [], size
        with DedupStore.open_existing(path) as store:
            for attempt in range(repeats):
                ids = [message_id(n) for n in range(next_id, next_id + BATCH)]
                store.record(ids, [1_790_000_000_000] * len(ids), output_offset=next_id + BATCH)
                next_id += BATCH
                target = scratch / f"ckpt-{size}-{attempt}"
                started = time.perf_counter()
                facts = take_checkpoint(store, target)
                timings.append(time.perf_counter() - started)
                if attempt < repeats - 1:
                    shutil.rmtree(target)
        checkpoint = scratch / f"ckpt-{size}-{repeats - 1}"
        results[size] = {
            "build_seconds": round(build_seconds, 2),
            "checkpoint_seconds_median": round(statistics.median(timings), 4),
            "checkpoint_seconds_all": [round(t, 4) for t in timings],
            "store_bytes": directory_bytes(checkpoint),
        }
        console.print(
            f"{size:>12,} ids: checkpoint median {statistics.median(timings) * 1000:.0f} ms "
            f"({results[size]['store_bytes'] / 2**20:.0f} MiB of files), store built in {build_seconds:.0f}s"
        )
        largest = (facts, checkpoint)
    return results, largest


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class MotoProcess:
    """A moto server in its own process, so it does not share the client's GIL."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> MotoProcess:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.2)
        raise SystemExit("moto server did not start")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)


def _empty_bucket(client, bucket: str) -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


def bench_s3(scratch: Path, facts: CheckpointFacts, checkpoint: Path, moto: MotoProcess, repeats: int) -> dict:
    import boto3

    aws = AwsOptions(endpoint_url=moto.url)
    client = aws.client("s3")
    client.create_bucket(Bucket="bench-snapshots")
    sid = "bench-in-0-20261122T120000.000Z"
    manifest = build_manifest(sid, facts, checkpoint)
    total = manifest.total_bytes
    plain = boto3.session.Session().client("s3", endpoint_url=moto.url)
    ours_up, plain_up, ours_down, plain_down = [], [], [], []
    for _ in range(repeats):
        _empty_bucket(client, "bench-snapshots")
        backend = S3Backend("s3://bench-snapshots/ours", aws)
        started = time.perf_counter()
        backend.publish(checkpoint, manifest, NO_PROGRESS)
        ours_up.append(time.perf_counter() - started)

        started = time.perf_counter()
        for entry in manifest.files:
            plain.upload_file(str(checkpoint / entry.name), "bench-snapshots", f"plain/{entry.name}")
        plain_up.append(time.perf_counter() - started)

        target = scratch / "s3-plain-down"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        started = time.perf_counter()
        for entry in manifest.files:
            plain.download_file("bench-snapshots", f"plain/{entry.name}", str(target / entry.name))
        plain_down.append(time.perf_counter() - started)

        target = scratch / "s3-ours-down"
        shutil.rmtree(target, ignore_errors=True)
        started = time.perf_counter()
        backend.fetch(sid, target, NO_PROGRESS)
        ours_down.append(time.perf_counter() - started)

    def mib_s(seconds: list[float]) -> float:
        return round(total / 2**20 / min(seconds), 1)

    result = {
        "bytes": total,
        "files": len(manifest.files),
        "upload_mib_s": {"dedupectl": mib_s(ours_up), "plain_boto3": mib_s(plain_up)},
        "download_mib_s": {"dedupectl_with_verify": mib_s(ours_down), "plain_boto3": mib_s(plain_down)},
        "seconds": {"ours_up": ours_up, "plain_up": plain_up, "ours_down": ours_down, "plain_down": plain_down},
    }
    result["upload_ratio"] = round(min(plain_up) / min(ours_up), 2)
    result["download_ratio"] = round(min(plain_down) / min(ours_down), 2)
    return result


def produce_output(kafka: KafkaConfig, topic: str, count: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": True,
        }
    )
    started = time.perf_counter()
    for n in range(count):
        key = message_id(n)
        while True:
            try:
                producer.produce(topic, VALUE % (n % 10_000_000, key), key, 0)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise SystemExit("output records were not all delivered")
    return time.perf_counter() - started


def bench_bringup(scratch: Path, count: int, moto: MotoProcess | None) -> dict:
    results: dict = {"ids": count}
    with LocalBroker(scratch / "broker") as broker:
        kafka = KafkaConfig(broker.bootstrap_servers, timeout_s=60)
        create_topics(kafka, ["bench-out"], 1)
        with console.status(f"producing {count:,} output records"):
            results["produce_seconds"] = round(produce_output(kafka, "bench-out", count), 1)
        console.print(f"produced {count:,} output records in {results['produce_seconds']}s")

        rebuilt_dir = scratch / "rebuilt"
        with console.status("rebuild: recovery over the whole output partition"):
            started = time.perf_counter()
            with (
                DedupStore.open(store_path(rebuilt_dir, TOPIC, 0), topic=TOPIC, partition=0) as store,
                OutputReader(kafka) as reader,
            ):
                recovery = catch_up(store, reader, "bench-out", 0)
                rebuilt_ids = store.state.next_seq
            results["rebuild_seconds"] = round(time.perf_counter() - started, 2)
        console.print(f"rebuild: {rebuilt_ids:,} ids in {results['rebuild_seconds']}s ({recovery.scanned:,} read)")

        (local,) = create_snapshots(rebuilt_dir, partitions=[0], destination=str(scratch / "local-snapshots"))
        variants = {"local": str(scratch / "local-snapshots")}
        if moto is not None:
            aws = AwsOptions(endpoint_url=moto.url)
            aws.client("s3").create_bucket(Bucket="bench-bringup")
            staged = scratch / "bringup-s3-staging"
            shutil.copytree(Path(local.location) / "store", staged)
            backend = LocalBackend(scratch / "local-snapshots")
            manifest = backend.read_manifest(local.snapshot_id)
            S3Backend("s3://bench-bringup/p", aws).publish(staged, manifest, NO_PROGRESS)
            variants["s3"] = "s3://bench-bringup/p"
        for name, source in variants.items():
            data_dir = scratch / f"bringup-{name}"
            with console.status(f"bring-up from the {name} snapshot"):
                started = time.perf_counter()
                restore_snapshot(source, local.snapshot_id, data_dir, aws=AwsOptions(endpoint_url=moto and moto.url))
                with (
                    DedupStore.open_existing(store_path(data_dir, TOPIC, 0)) as store,
                    OutputReader(kafka) as reader,
                ):
                    tail = catch_up(store, reader, "bench-out", 0)
                    ids = store.state.next_seq
                seconds = time.perf_counter() - started
            assert ids == rebuilt_ids, f"{name}: {ids} ids after bring-up, {rebuilt_ids} rebuilt"
            results[f"snapshot_{name}_seconds"] = round(seconds, 2)
            results[f"speedup_{name}"] = round(results["rebuild_seconds"] / seconds, 1)
            console.print(
                f"bring-up from {name} snapshot: {seconds:.2f}s (recovery read {tail.scanned} new records), "
                f"{results[f'speedup_{name}']}x faster than the rebuild"
            )
    return results


def _rows(report: dict, sizes: list[int]) -> list[tuple[str, ...]]:
    rows = []
    if "checkpoint" in report:
        figures = report["checkpoint"]
        for size in sizes:
            rows.append((f"checkpoint at {size:,} ids", f"{figures[size]['checkpoint_seconds_median'] * 1000:.0f} ms"))
        small, large = min(sizes), max(sizes)
        growth = figures[large]["checkpoint_seconds_median"] / figures[small]["checkpoint_seconds_median"]
        report["checkpoint_growth"] = round(growth, 2)
        rows.append((f"checkpoint {large:,} / {small:,}", f"{growth:.2f}x", "", "", "flat (hard links)"))
    if "s3" in report:
        s3 = report["s3"]
        up, down = s3["upload_mib_s"], s3["download_mib_s"]
        rows.append(
            ("S3 upload MiB/s", str(up["dedupectl"]), str(up["plain_boto3"]), f"{s3['upload_ratio']}x", ">= 0.9x")
        )
        rows.append(
            (
                "S3 download+verify MiB/s",
                str(down["dedupectl_with_verify"]),
                str(down["plain_boto3"]),
                f"{s3['download_ratio']}x",
                ">= 0.9x",
            )
        )
    bringup = report.get("bringup", {})
    for name in ("local", "s3"):
        if f"snapshot_{name}_seconds" in bringup:
            rows.append(
                (
                    f"bring-up {bringup['ids']:,} ids from {name} snapshot",
                    f"{bringup[f'snapshot_{name}_seconds']}s",
                    f"rebuild {bringup['rebuild_seconds']}s",
                    f"{bringup[f'speedup_{name}']}x",
                    ">= 10x",
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000", help="store sizes for the checkpoint figure")
    parser.add_argument("--replay-ids", type=int, default=10_000_000, help="ids in the output topic to bring up")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip", default="", help="comma-separated sections to skip: checkpoint,s3,bringup")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/snapshots.json")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    # only the local moto server is ever called: dummy credentials, never the operator's own
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    os.environ.pop("AWS_PROFILE", None)
    skip = set(filter(None, args.skip.split(",")))
    report: dict = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "shared": True},
        "sizes": sizes,
        "replay_ids": args.replay_ids,
    }
    with tempfile.TemporaryDirectory(prefix="dedupectl-bench-snap-") as tmp, MotoProcess() as moto:
        scratch = Path(tmp)
        if "checkpoint" not in skip or "s3" not in skip:
            report["checkpoint"], (facts, checkpoint) = bench_checkpoints(scratch, sizes, args.repeats)
            if "s3" not in skip:
                with console.status("S3 transfers against plain boto3"):
                    report["s3"] = bench_s3(scratch, facts, checkpoint, moto, args.repeats)
                console.print(f"S3: {json.dumps({k: v for k, v in report['s3'].items() if k != 'seconds'})}")
            for size in sizes:
                shutil.rmtree(scratch / f"ckpt-{size}", ignore_errors=True)
        if "bringup" not in skip:
            report["bringup"] = bench_bringup(scratch, args.replay_ids, moto)

    table = Table(title="dedupectl snapshots (shared machine: expect noise)")
    for column in ("figure", "value", "baseline (same run)", "ratio", "target"):
        table.add_column(column)
    for row in _rows(report, sizes):
        table.add_row(*row)
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    console.print(f"written to {args.out}")


if __name__ == "__main__":
    main()
