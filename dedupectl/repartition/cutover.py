"""``dedupectl repartition cutover``: the new layout put in place of the old, with the workers stopped.

The invariant it keeps, for every new partition Q (the worker's recovery assumes it of every store):

    store Q holds every id published within the output's retention whose key the partitioner puts in Q under
    the new count, up to its covered output offset C(Q); and every record of output partition Q at or past
    C(Q) is one the new layout's worker Q published.

The build gave each store the ids of the old output partitions up to the offsets it read to. The cutover:

1. refuses (nothing changed) unless the topics still have the old count, no worker runs on the data
   directory, no transaction is open on an old output partition and every old store here covers its output
   partition's end: the old layout publishes nothing more, and nothing it began can still commit;
2. folds the tails: what the old workers published after the build's read is read (read_committed) and each
   id the store of its new partition lacks is recorded there; C(Q) is then output Q's end for an old
   partition (its earlier records are the old layout's, already folded in) and 0 for a new one (empty);
3. gives the output topic the new count, then the input topic: a worker of a new input partition always has
   its output partition;
4. moves the old stores aside (``<store>.replaced-<UTC time>``, kept: the cutover deletes nothing) and
   renames the new ones into place.

Each step is noted in the manifest once done; until the last, the worker refuses to start on the data
directory, and running the cutover again goes on from the first step not done.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from dedupectl.config import KafkaConfig
from dedupectl.errors import RepartitionError
from dedupectl.kafka_clients import grow_partitions
from dedupectl.partitioner import partitions_of
from dedupectl.repartition.manifest import CUTTING_OVER, Manifest, staging_dir
from dedupectl.worker.crashpoint import CrashPoint
from reconcile.kafka import admin_client, partition_counts
from reconcile.scan import OutputReader
from store.dedup_store import DedupStore
from store.layout import moved_aside_path, store_path
from store.worker_status import describe, live_worker_for
from store.writer_lock import writer_holds

log = logging.getLogger(__name__)

FOLDED, OUTPUT_GROWN, INPUT_GROWN, SWAPPED = "folded", "output-grown", "input-grown", "swapped"
GROUP_MARGIN_S = 5.0  # past the session timeout, for the coordinator to expire a stopped static member


@dataclass(frozen=True)
class CutoverRequest:
    kafka: KafkaConfig
    input_topic: str
    output_topic: str
    data_dir: Path
    group_id: str
    session_timeout_ms: int  # the workers': how long a stopped static member stays in the group


@dataclass(frozen=True)
class FoldedTail:
    partition: int  # old output partition
    offsets: tuple[int, int]  # read, [the build's end, the end now)
    records: int
    recorded: int  # ids a new store lacked, recorded there


@dataclass(frozen=True)
class CutoverReport:
    old_count: int
    new_count: int
    partitioner: str
    tails: tuple[FoldedTail, ...]  # empty when a cutover run before had folded them
    covered: tuple[int, ...]  # per new partition: the output offset its store covers
    moved_aside: tuple[Path, ...]  # the old stores, kept: the cutover deletes nothing
    resumed: bool  # a cutover begun before was finished
    seconds: float


def cutover(request: CutoverRequest) -> CutoverReport:
    """The cutover's steps, each noted once done. The crash tests SIGKILL it at ``cutover-fold`` (after an old
    partition's tail), ``cutover-step`` (after a step is noted) and ``cutover-swap`` (after a store's swap)."""
    started = time.monotonic()
    crashpoint = CrashPoint.from_environment()
    staging = staging_dir(request.data_dir, request.input_topic)
    manifest = Manifest.load(staging)
    if (manifest.input_topic, manifest.output_topic) != (request.input_topic, request.output_topic):
        raise RepartitionError(
            f"the build in {staging} is of {manifest.input_topic!r} -> {manifest.output_topic!r}",
            "run the cutover with the topics it was built for",
        )
    refuse_running_workers(request.data_dir, request.input_topic, manifest)
    await_empty_group(request)
    resumed = manifest.phase == CUTTING_OVER
    if not resumed:
        check_old_layout_stopped(request, manifest)
        manifest = manifest.with_phase(CUTTING_OVER)
        manifest.save(staging)
    tails: tuple[FoldedTail, ...] = ()
    if FOLDED not in manifest.steps:
        tails, covered = fold_tails(request, manifest, staging, crashpoint)
        manifest = manifest.with_step(FOLDED, covered=covered)
        manifest.save(staging)
        crashpoint("cutover-step")
    for step, topic in ((OUTPUT_GROWN, request.output_topic), (INPUT_GROWN, request.input_topic)):
        if step not in manifest.steps:
            grow_partitions(request.kafka, topic, manifest.new_count)
            manifest = manifest.with_step(step)
            manifest.save(staging)
            crashpoint("cutover-step")
    moved = _swap_stores(request, manifest, staging, crashpoint)
    manifest = manifest.with_step(SWAPPED)
    manifest.save(staging)
    os.replace(staging, _kept_record(request.data_dir, request.input_topic))
    return CutoverReport(
        old_count=manifest.old_count,
        new_count=manifest.new_count,
        partitioner=manifest.partitioner,
        tails=tails,
        covered=manifest.covered,
        moved_aside=tuple(moved),
        resumed=resumed,
        seconds=time.monotonic() - started,
    )


def refuse_running_workers(data_dir: Path, input_topic: str, manifest: Manifest) -> None:
    """No process may hold a store of the topic here, old or new, nor a live worker claim one of its partitions."""
    for partition in range(max(manifest.old_count, manifest.new_count)):
        status = live_worker_for(data_dir, input_topic, partition)
        if status is not None:
            raise RepartitionError(
                f"{describe(status)} serves {input_topic}[{partition}] from {data_dir}",
                "stop every worker of the topic (SIGTERM) before the cutover",
            )
        for path in (
            store_path(data_dir, input_topic, partition),
            store_path(staging_dir(data_dir, input_topic), input_topic, partition),
        ):
            if writer_holds(path):
                raise RepartitionError(
                    f"a process holds the store {path} open", "stop every worker of the topic before the cutover"
                )


def await_empty_group(request: CutoverRequest) -> None:
    """Wait until the workers' group has no member, or refuse: a member left is a worker still running (on
    any host), or a stopped static member its session still holds. A worker that joins while one is held takes
    its place with its old assignment and no rebalance: it would never be given the new partitions."""
    admin = admin_client(request.kafka)
    deadline = time.monotonic() + request.session_timeout_ms / 1000 + GROUP_MARGIN_S
    while True:
        description = admin.describe_consumer_groups([request.group_id], request_timeout=request.kafka.timeout_s)
        members = description[request.group_id].result().members
        if not members:
            return
        if time.monotonic() > deadline:
            names = ", ".join(sorted(f"{m.group_instance_id or m.client_id} on {m.host}" for m in members))
            raise RepartitionError(
                f"group {request.group_id!r} still has members ({names}): a worker still runs on the old layout",
                "stop every worker of the group (SIGTERM), then run the cutover again",
            )
        time.sleep(0.5)


def check_old_layout_stopped(request: CutoverRequest, manifest: Manifest) -> None:
    """The refusals of a first run: the old count still on both topics, no transaction open on an old output
    partition (one a stopped worker began could still commit), and every old store here at its output's end."""
    counts = partition_counts(request.kafka, [request.input_topic, request.output_topic])
    if counts != {request.input_topic: manifest.old_count, request.output_topic: manifest.old_count}:
        raise RepartitionError(
            f"the topics have {counts[request.input_topic]} and {counts[request.output_topic]} partitions, not "
            f"the {manifest.old_count} the build read",
            "build again (`dedupectl repartition build --replace`) for the topics as they are",
        )
    with OutputReader(request.kafka) as reader:
        for partition in range(manifest.old_count):
            bounds = reader.bounds(request.output_topic, partition)
            log_end = reader.log_end(request.output_topic, partition)
            if log_end > bounds.end:
                raise RepartitionError(
                    f"a transaction is open on {request.output_topic}[{partition}] (offsets {bounds.end}..{log_end}):"
                    " a worker stopped in the middle of a batch",
                    "start the worker on the old layout until it has recovered, stop it (SIGTERM), then run the "
                    "cutover again",
                )
            path = store_path(request.data_dir, request.input_topic, partition)
            if not (path / "CURRENT").exists():
                continue
            with DedupStore.open_secondary(path) as store:
                covered = store.state.output_offset
            if bounds.end - max(covered, 0) > 1:  # past the store's last record lies at most its commit marker
                raise RepartitionError(
                    f"store {path} covers {request.output_topic}[{partition}] up to offset {covered}, not its end "
                    f"{bounds.end}: its worker stopped before recording its last batch",
                    "start the worker on the old layout until it has recovered, stop it (SIGTERM), then run the "
                    "cutover again",
                )


def fold_tails(
    request: CutoverRequest, manifest: Manifest, staging: Path, crashpoint: CrashPoint
) -> tuple[tuple[FoldedTail, ...], tuple]:
    """Record in the new stores the ids published to the old output partitions after the build's read; return
    what was read and each new store's covered output offset (its state is set to it)."""
    stores = {
        partition: DedupStore.open_existing(store_path(staging, request.input_topic, partition))
        for partition in range(manifest.new_count)
    }
    tails = []
    try:
        with OutputReader(request.kafka) as reader:
            ends = [reader.bounds(request.output_topic, p).end for p in range(manifest.old_count)]
            for partition, (start, end) in enumerate(zip(manifest.read_to, ends, strict=True)):
                records = recorded = 0
                for batch in reader.scan(request.output_topic, partition, start, stop_offset=end):
                    records += len(batch.ids)
                    recorded += _fold(stores, batch.ids, batch.timestamps_ms, manifest)
                tails.append(FoldedTail(partition, (start, end), records, recorded))
                crashpoint("cutover-fold")
        covered = tuple(ends[q] if q < manifest.old_count else 0 for q in range(manifest.new_count))
        for partition, store in stores.items():
            store.write_state(replace(store.state, output_offset=covered[partition]))
    finally:
        for store in stores.values():
            store.close()
    return tuple(tails), covered


def _fold(stores: dict[int, DedupStore], keys: list[bytes], stamps: list[int], manifest: Manifest) -> int:
    """Record the ids of one batch that their new partition's store lacks (first copy wins); how many."""
    first: dict[bytes, int] = {}
    for at, key in enumerate(keys):
        if key:
            first.setdefault(key, at)
    ids = list(first)
    if not ids:
        return 0
    targets = partitions_of(ids, manifest.new_count, manifest.partitioner).tolist()
    recorded = 0
    for partition, store in stores.items():
        mine = [message_id for message_id, target in zip(ids, targets, strict=True) if target == partition]
        if not mine:
            continue
        lacking = [message_id for message_id, held in zip(mine, store.contains_many(mine), strict=True) if not held]
        if lacking:
            store.record(lacking, [stamps[first[message_id]] for message_id in lacking])
            recorded += len(lacking)
    return recorded


def _swap_stores(request: CutoverRequest, manifest: Manifest, staging: Path, crashpoint: CrashPoint) -> list[Path]:
    """Each new store into place, the old one moved aside first; a store already swapped is left."""
    moved = []
    for partition in range(manifest.new_count):
        built = store_path(staging, request.input_topic, partition)
        if not built.exists():
            continue  # swapped by a cutover run before
        target = store_path(request.data_dir, request.input_topic, partition)
        if target.exists():
            aside = moved_aside_path(target)
            target.rename(aside)
            moved.append(aside)
        built.rename(target)
        crashpoint("cutover-swap")
    return moved


def _kept_record(data_dir: Path, input_topic: str) -> Path:
    """Where the finished cutover's manifest is kept (the staged stores are gone by then)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Path(data_dir) / f".{input_topic}.repartitioned-{stamp}"
