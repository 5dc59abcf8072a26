"""``dedupectl repartition plan``: what a change of partition count takes, and the checks every step repeats.

Read-only: the topics' counts, the partitioner (named, or found in the output's keyed records as the worker's
``auto`` guard settles, without its fallback: a mix of partitioners cannot be repartitioned), the stores to
build (every new partition's, 0..N-1), the ids they will hold (the output's retained keyed records, an upper
bound: repeats are counted), the disk that takes (at the old stores' bytes per id) and, given a rate, how long.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dedupectl.config import BOUND_BYTES_PER_ID, KafkaConfig
from dedupectl.errors import RepartitionError
from dedupectl.partitioner import PARTITIONERS, partitions_of
from dedupectl.repartition.manifest import staging_dir
from dedupectl.worker.routing import AUTO_SETTLE_RECORDS
from reconcile.kafka import partition_counts
from reconcile.scan import OutputReader
from store.dedup_store import DedupStore
from store.footprint import dir_bytes
from store.layout import store_path


@dataclass(frozen=True)
class PlanRequest:
    kafka: KafkaConfig
    input_topic: str
    output_topic: str
    data_dir: Path
    new_count: int
    partitioner: str = "auto"  # murmur2, crc32, or auto: found in the output's keyed records
    ids_per_second: float | None = None  # the build's rate, measured (benchmarks/bench_repartition.py)


@dataclass(frozen=True)
class RepartitionPlan:
    input_topic: str
    output_topic: str
    old_count: int
    new_count: int
    partitioner: str
    partitioner_found: bool  # found in the output's records (else named)
    stores: tuple[int, ...]  # the new partitions whose stores the build writes
    output_records: int  # keyed or not, retained in the old output partitions: the ids' upper bound
    bytes_per_id: float
    bytes_per_id_measured: bool  # from the old stores on this host (else the bound's figure)
    disk_needed: int
    disk_free: int
    build_seconds: float | None  # at ``ids_per_second``; None when no rate was given
    staging: Path


def make_plan(request: PlanRequest) -> RepartitionPlan:
    """The plan, or a RepartitionError (nothing changed) for a count that does not grow, topics whose counts
    differ, a partitioner that cannot be determined, or too little disk."""
    counts = partition_counts(request.kafka, [request.input_topic, request.output_topic])
    old, outputs = counts[request.input_topic], counts[request.output_topic]
    refuse_counts(request.input_topic, request.output_topic, old, outputs, request.new_count)
    with OutputReader(request.kafka) as reader:
        bounds = [reader.bounds(request.output_topic, partition) for partition in range(old)]
        partitioner, found = resolve_partitioner(reader, request.output_topic, old, request.partitioner)
    records = sum(max(b.end - b.low, 0) for b in bounds)
    per_id, measured = bytes_per_id(request.data_dir, request.input_topic, old)
    needed = int(records * per_id)
    free = _free_bytes(request.data_dir)
    if needed > free:
        raise RepartitionError(
            f"the new stores need about {needed:,} bytes in {request.data_dir}, {free:,} are free",
            "free space (or grow the volume) before building",
        )
    seconds = None if not request.ids_per_second else records / request.ids_per_second
    return RepartitionPlan(
        input_topic=request.input_topic,
        output_topic=request.output_topic,
        old_count=old,
        new_count=request.new_count,
        partitioner=partitioner,
        partitioner_found=found,
        stores=tuple(range(request.new_count)),
        output_records=records,
        bytes_per_id=per_id,
        bytes_per_id_measured=measured,
        disk_needed=needed,
        disk_free=free,
        build_seconds=seconds,
        staging=staging_dir(request.data_dir, request.input_topic),
    )


def refuse_counts(input_topic: str, output_topic: str, old: int, outputs: int, new: int) -> None:
    if outputs != old:
        raise RepartitionError(
            f"output topic {output_topic!r} has {outputs} partitions but input {input_topic!r} has {old}",
            "a repartition starts from topics of one count; a cutover left half done is finished by running "
            "`dedupectl repartition cutover` again",
        )
    if new <= old:
        raise RepartitionError(
            f"--partition-count {new} does not grow {input_topic!r} (it has {old} partitions)",
            "Kafka cannot remove partitions: give a count above the current one",
        )


def resolve_partitioner(reader: OutputReader, topic: str, count: int, choice: str) -> tuple[str, bool]:
    """The partitioner named, or the one the output's recent keyed records all match (at least
    ``AUTO_SETTLE_RECORDS`` of them, as the worker's guard needs): with the new count a wrong one would put
    ids in stores their records never reach."""
    if choice in PARTITIONERS:
        return choice, False
    if choice != "auto":
        raise RepartitionError(f"unknown partitioner {choice!r}", "pass --partitioner murmur2, crc32 or auto")
    matched, observed = dict.fromkeys(PARTITIONERS, 0), 0
    for partition in range(count):
        end = reader.bounds(topic, partition)
        start = max(end.low, end.end - AUTO_SETTLE_RECORDS)
        for batch in reader.scan(topic, partition, start, stop_offset=end.end):
            keys = [key for key in batch.ids if key]
            if not keys:
                continue
            for name in PARTITIONERS:
                matched[name] += int(np.count_nonzero(partitions_of(keys, count, name) == partition))
            observed += len(keys)
    matching_all = [name for name, hits in matched.items() if hits == observed]
    if count > 1 and observed >= AUTO_SETTLE_RECORDS and len(matching_all) == 1:
        return matching_all[0], True
    why = (
        f"only {observed} keyed records in {topic}"
        if observed < AUTO_SETTLE_RECORDS or count == 1
        else f"of {observed} keyed records in {topic}, "
        + ", ".join(f"{name} matched {hits}" for name, hits in matched.items())
    )
    raise RepartitionError(
        f"cannot determine the producers' partitioner: {why}",
        "pass --partitioner murmur2 (Java producers) or crc32 (librdkafka's default)",
    )


def bytes_per_id(data_dir: Path, input_topic: str, count: int) -> tuple[float, bool]:
    """The old stores' bytes on disk per live id, where they are here; else the bound's per-id figure."""
    total_bytes = total_ids = 0
    for partition in range(count):
        path = store_path(data_dir, input_topic, partition)
        if not (path / "CURRENT").exists():
            continue
        with DedupStore.open_secondary(path) as store:
            total_ids += store.state.live_ids
        total_bytes += dir_bytes(path)
    if total_ids <= 0:
        return float(BOUND_BYTES_PER_ID), False
    return total_bytes / total_ids, True


def _free_bytes(data_dir: Path) -> int:
    probe = Path(data_dir)
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free
