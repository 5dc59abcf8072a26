"""The fleet at a glance (``dedupectl status``): per input partition its owner, lag, rate, effective window
against the floor, store size, last commit age and a verdict, from any host that reaches Kafka.

Where each figure comes from:
- Kafka (always): the input's end offsets, the group's committed offsets (lag, and messages/s from two reads),
  the group's members and their assignments (owner: the static member id is the worker id);
- the workers' metrics endpoints (``--metrics``): window, store bytes, refusals, the worker's last commit,
  records in the wrong partition or without a key (counted since the worker started), and whether a
  partition's owner is still alive (an endpoint on its host that refuses connections says it is not);
- data directories readable from here (``--data-dir``): window, store bytes and refusals from the stores
  (opened as secondaries, as ``dedupectl window`` does), and the hosts in the workers' status files.
A figure that none of these gives is left empty, and the report says why in ``unavailable``.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from dedupectl.errors import DedupeError
from dedupectl.scrape import PartitionFigures, scrape
from reconcile.broker_retry import RetryPolicy, describe, with_retries
from reconcile.errors import BrokerError
from reconcile.gaps import describe as describe_gap
from reconcile.kafka import KafkaConfig, admin_client, make_consumer, partition_counts
from store.selection import select_stores
from store.window import read_windows
from store.worker_status import is_live, read_statuses

DEFAULT_FLOOR_S = 24 * 3600.0
DEFAULT_STALL_S = 300.0
DEFAULT_MAX_LAG = 1000
REACH_TIMEOUT_S = 5.0  # a look at the fleet names an unreachable broker this soon, instead of waiting it out
READ_ONLY_ADVICE = "check the bootstrap servers (-b / bootstrap_servers), the network and the brokers"

# verdicts, worst first; all but the warnings and ok page (exit 1). MISROUTED: copies of one id in two
# partitions are all published; UNKEYED: they may be, if the producer spreads an id's copies (not checkable)
REFUSED, BELOW_FLOOR, NO_OWNER, ENDPOINT_DOWN = "REFUSED", "BELOW FLOOR", "NO OWNER", "ENDPOINT DOWN"
STALLED, MISROUTED, LAGGING, UNKEYED, OK = "STALLED", "MISROUTED", "LAGGING", "UNKEYED", "ok"
FAILING = (REFUSED, BELOW_FLOOR, NO_OWNER, ENDPOINT_DOWN, STALLED, MISROUTED)
WARNINGS = (LAGGING, UNKEYED)


@dataclass(frozen=True)
class StatusRequest:
    kafka: KafkaConfig
    input_topic: str
    group_id: str
    output_topic: str | None = None  # checked to exist, so a mistyped name is refused, not shown as a fleet
    data_dirs: tuple[Path, ...] = ()
    metrics: tuple[str, ...] = ()
    floor_s: float = DEFAULT_FLOOR_S
    stall_s: float = DEFAULT_STALL_S
    max_lag: int = DEFAULT_MAX_LAG


@dataclass(frozen=True)
class KafkaSample:
    """What Kafka says at one moment: enough for lag, owners, and a rate against the next sample."""

    taken_at: float  # monotonic
    partitions: int
    ends: dict[int, int]
    committed: dict[int, int]
    owners: dict[int, tuple[str, str]]  # partition -> (worker id, client host)
    group_state: str


@dataclass(frozen=True)
class StoreFigures:
    """What the stores, status files and endpoints say, by partition."""

    figures: dict[int, PartitionFigures] = field(default_factory=dict)
    sources: dict[int, str] = field(default_factory=dict)  # where a partition's store figures came from
    last_commit_at: dict[int, float | None] = field(default_factory=dict)  # per partition, from its endpoint
    hosts: dict[str, str] = field(default_factory=dict)  # worker id -> host name, from status files
    unavailable: tuple[str, ...] = ()
    down_hosts: frozenset[str] = frozenset()  # addresses of the endpoints that refused connections


@dataclass(frozen=True)
class PartitionStatus:
    partition: int
    worker_id: str | None
    host: str | None
    end_offset: int
    committed_offset: int | None
    lag: int | None
    messages_per_s: float | None
    window_seconds: float | None
    store_bytes: int | None
    last_commit_age_s: float | None
    refused: str | None
    store_figures_from: str | None
    verdict: str
    misrouted: int | None = None  # since its worker started; None: no endpoint reports the partition
    unkeyed: int | None = None


@dataclass(frozen=True)
class FleetStatus:
    input_topic: str
    group_id: str
    group_state: str
    floor_seconds: float
    taken_at: float  # Unix time
    seconds: float  # how long gathering took
    partitions: tuple[PartitionStatus, ...]
    unavailable: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        return 1 if any(p.verdict in FAILING for p in self.partitions) else 0


# -- Kafka ---------------------------------------------------------------------------------------------------


class _Clients:
    """The admin client, and a consumer of the workers' group that never subscribes (so never joins it): the
    committed offsets are read through it, because librdkafka's admin ListConsumerGroupOffsets can crash the
    process when the broker answers it with a group coordinator error."""

    def __init__(self, request: StatusRequest) -> None:
        self.admin = admin_client(request.kafka)
        self.offsets = offsets_reader(request.kafka, request.group_id)

    def close(self) -> None:
        self.offsets.close()


def offsets_reader(kafka: KafkaConfig, group_id: str) -> Consumer:
    """A consumer that reads ``group_id``'s committed offsets without joining the group. read_uncommitted: the
    broker then answers with the last committed offsets at once, instead of waiting out an open transaction's
    pending ones (a stalled worker's would hold the answer back until its transaction times out)."""
    settings = {"group.id": group_id, "enable.auto.commit": False, "isolation.level": "read_uncommitted"}
    return make_consumer(kafka, **settings)


def committed_offsets(reader: Consumer, tps: list[TopicPartition], timeout_s: float) -> dict[int, int]:
    """Committed offset by partition; a partition the group never committed is left out."""
    return {tp.partition: tp.offset for tp in reader.committed(tps, timeout=timeout_s) if tp.offset >= 0}


def kafka_sample(clients: _Clients, request: StatusRequest, partitions: int | None = None) -> KafkaSample:
    """Kafka's side, retried through transient faults (a leader moving) for at most the Kafka timeout; the
    first sample checks the topics, and names an unreachable broker within ``REACH_TIMEOUT_S``."""
    partitions = partitions or input_partitions(clients, request)
    policy = RetryPolicy(bound_s=request.kafka.timeout_s, max_delay_s=1.0, advice=READ_ONLY_ADVICE)
    what = f"reading group {request.group_id} and topic {request.input_topic}"
    try:
        return with_retries(lambda: _kafka_sample(clients, request, partitions), what, policy)
    except KafkaException as error:
        raise BrokerError(f"{what}: {describe(error)}", "check the group id, the topic and the ACLs") from error


def input_partitions(clients: _Clients, request: StatusRequest) -> int:
    """The input's partition count, once both topics are known to exist."""
    kafka = dataclasses.replace(request.kafka, timeout_s=min(request.kafka.timeout_s, REACH_TIMEOUT_S))
    topics = [request.input_topic, *([request.output_topic] if request.output_topic else [])]
    return partition_counts(kafka, topics, clients.admin)[request.input_topic]


def _kafka_sample(clients: _Clients, request: StatusRequest, count: int) -> KafkaSample:
    kafka, topic, group, admin = request.kafka, request.input_topic, request.group_id, clients.admin
    tps = [TopicPartition(topic, p) for p in range(count)]
    timeout = kafka.timeout_s
    ends_f = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, request_timeout=timeout)
    group_f = admin.describe_consumer_groups([group], request_timeout=timeout)
    committed = committed_offsets(clients.offsets, tps, timeout)
    ends = {tp.partition: f.result().offset for tp, f in ends_f.items()}
    owners, state = _owners(group_f[group].result(), topic)
    return KafkaSample(time.monotonic(), count, ends, committed, owners, state)


def _owners(description, topic: str) -> tuple[dict[int, tuple[str, str]], str]:
    owners = {}
    for member in description.members:
        worker = member.group_instance_id or member.client_id
        host = (member.host or "").lstrip("/")
        for tp in member.assignment.topic_partitions if member.assignment else []:
            if tp.topic == topic:
                owners[tp.partition] = (worker, host)
    state = getattr(description.state, "name", str(description.state)).lower()
    return owners, state


# -- stores, status files and metrics endpoints --------------------------------------------------------------


@dataclass(frozen=True)
class _DirFigures:
    figures: dict[int, PartitionFigures]
    served: frozenset[int]  # partitions a worker running from this directory holds: its stores are the live ones
    hosts: dict[str, str]
    note: str | None = None


def _from_data_dir(data_dir: Path, topic: str) -> _DirFigures:
    statuses = read_statuses(data_dir)
    hosts = {status.worker_id: status.host for status in statuses}
    served = frozenset(p for s in statuses if s.input_topic == topic and is_live(s) for p in s.partitions)
    try:
        infos = read_windows(select_stores(data_dir, topic))
    except DedupeError as error:
        return _DirFigures({}, served, hosts, f"stores in {data_dir}: {error}")
    figures = {
        info.partition: PartitionFigures(
            info.window_seconds,
            info.disk_bytes,
            None if info.refused_gap is None else describe_gap(info.refused_gap, topic, info.partition),
        )
        for info in infos
    }
    return _DirFigures(figures, served, hosts)


def gather_stores(request: StatusRequest) -> StoreFigures:
    """Every endpoint and data directory, read at once. A running worker's own figures win: an endpoint's over
    a data directory's, and a store its directory's live worker holds over a copy nobody runs from."""
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="status") as pool:
        scrapes = list(pool.map(scrape, request.metrics))
        dirs = list(pool.map(lambda d: _from_data_dir(d, request.input_topic), request.data_dirs))
    figures, sources, hosts, notes = {}, {}, {}, []
    for live in (False, True):
        for data_dir, found in zip(request.data_dirs, dirs, strict=True):
            for partition, figure in found.figures.items():
                if (partition in found.served) == live:
                    figures[partition] = figure
                    sources[partition] = f"data dir {data_dir}" + ("" if live else " (no worker running from it)")
    for found in dirs:
        hosts |= found.hosts
        notes += [found.note] if found.note else []
    last_commit = {}
    for result in scrapes:
        if result.error is not None:
            notes.append(f"metrics {result.url}: {result.error}")
            continue
        for partition, figure in result.partitions.items():
            figures[partition], sources[partition] = figure, result.url
            last_commit[partition] = result.last_commit_at
    down = frozenset(address for result in scrapes if result.refused for address in _addresses(result.host))
    return StoreFigures(figures, sources, last_commit, hosts, tuple(notes), down)


def _addresses(host: str) -> set[str]:
    """The addresses a host name stands for, as the group reports its members' (a name that does not resolve
    matches none)."""
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return set()


# -- putting it together -------------------------------------------------------------------------------------


def _verdict(request: StatusRequest, row: dict, endpoint_down: bool) -> str:
    window, lag, age = row["window_seconds"], row["lag"], row["last_commit_age_s"]
    if row["refused"]:
        return REFUSED
    if window is not None and window < request.floor_s:
        return BELOW_FLOOR
    if row["worker_id"] is None:
        return NO_OWNER
    if endpoint_down:
        return ENDPOINT_DOWN
    if lag and age is not None and age > request.stall_s:
        return STALLED
    if row["misrouted"]:
        return MISROUTED
    if lag is not None and lag > request.max_lag:
        return LAGGING
    if row["unkeyed"]:
        return UNKEYED
    return OK


def _rate(now: KafkaSample, before: KafkaSample | None, partition: int) -> float | None:
    if before is None or partition not in now.committed or partition not in before.committed:
        return None
    elapsed = now.taken_at - before.taken_at
    return (now.committed[partition] - before.committed[partition]) / elapsed if elapsed > 0 else None


def partition_status(
    request: StatusRequest, now: KafkaSample, before: KafkaSample | None, stores: StoreFigures, p: int
) -> PartitionStatus:
    """One partition's row: ``before`` is the previous Kafka sample (for the rate), if any."""
    end, committed = now.ends.get(p, -1), now.committed.get(p)
    worker, client_host = now.owners.get(p, (None, None))
    figure = stores.figures.get(p, PartitionFigures())
    last_commit = stores.last_commit_at.get(p)
    row = {
        "partition": p,
        "worker_id": worker,
        "host": stores.hosts.get(worker, client_host) if worker else None,
        "end_offset": end,
        "committed_offset": committed,
        "lag": None if end < 0 else max(end - (committed or 0), 0),
        "messages_per_s": _rate(now, before, p),
        "window_seconds": figure.window_seconds,
        "store_bytes": figure.store_bytes,
        "last_commit_age_s": None if last_commit is None else max(time.time() - last_commit, 0.0),
        "refused": figure.refused,
        "store_figures_from": stores.sources.get(p),
        "misrouted": figure.misrouted if p in stores.last_commit_at else None,  # only an endpoint counts them
        "unkeyed": figure.unkeyed if p in stores.last_commit_at else None,
    }
    return PartitionStatus(**row, verdict=_verdict(request, row, _endpoint_down(now, stores, p)))


def _endpoint_down(now: KafkaSample, stores: StoreFigures, partition: int) -> bool:
    """The partition's owner answers on no endpoint given, and an endpoint on its host refused connections: its
    process is gone, though the group counts it as the owner until its session times out."""
    worker, client_host = now.owners.get(partition, (None, None))
    if worker is None or client_host not in stores.down_hosts:
        return False
    answering = {now.owners[p][0] for p in stores.last_commit_at if p in now.owners}
    return worker not in answering


def _unavailable(request: StatusRequest, now: KafkaSample, before: KafkaSample | None, stores: StoreFigures):
    notes = list(stores.unavailable)
    missing = [p for p in range(now.partitions) if p not in stores.figures]
    if missing:
        given = request.metrics or request.data_dirs
        where = "no endpoint or data directory given holds them" if given else "give --metrics or --data-dir"
        notes.append(f"window and store size of partition(s) {_ranges(missing)}: {where}")
    unscraped = [p for p in range(now.partitions) if p not in stores.last_commit_at]
    if unscraped:
        notes.append(f"last commit age of partition(s) {_ranges(unscraped)}: only the worker's --metrics has it")
    idle = [p for p, at in stores.last_commit_at.items() if at is None]
    if idle:
        notes.append(f"last commit age of partition(s) {_ranges(sorted(idle))}: their worker has not committed yet")
    if before is None:
        notes.append("messages/s: needs a second read of the committed offsets")
    return tuple(notes)


def _ranges(numbers: Sequence[int]) -> str:
    spans, start = [], None
    for at, number in enumerate(numbers):
        if start is None:
            start = number
        if at + 1 == len(numbers) or numbers[at + 1] != number + 1:
            spans.append(str(start) if start == number else f"{start}-{number}")
            start = None
    return ",".join(spans)


class FleetProbe:
    """The same Kafka clients for every read (``--watch`` calls ``status`` again and again); close it after."""

    def __init__(self, request: StatusRequest) -> None:
        self.request = request
        self._clients = _Clients(request)
        self._previous: KafkaSample | None = None

    def sample(self) -> KafkaSample:
        self._previous = kafka_sample(self._clients, self.request)
        return self._previous

    def close(self) -> None:
        self._clients.close()

    def __enter__(self) -> FleetProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def status(self) -> FleetStatus:
        """The fleet now; messages/s over the time since the previous sample (or status)."""
        began = time.monotonic()
        request, before = self.request, self._previous
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="status-stores") as pool:
            stores_f = pool.submit(gather_stores, request)
            now = kafka_sample(self._clients, request, before.partitions if before else None)
            stores = stores_f.result()
        self._previous = now
        rows = tuple(partition_status(request, now, before, stores, p) for p in range(now.partitions))
        return FleetStatus(
            input_topic=request.input_topic,
            group_id=request.group_id,
            group_state=now.group_state,
            floor_seconds=request.floor_s,
            taken_at=time.time(),
            seconds=time.monotonic() - began,
            partitions=rows,
            unavailable=_unavailable(request, now, before, stores),
        )


def fleet_status(request: StatusRequest, rate_over_s: float = 2.0) -> FleetStatus:
    """One look at the fleet: two reads of the committed offsets ``rate_over_s`` apart give messages/s."""
    began = time.monotonic()
    with FleetProbe(request) as probe:
        first = probe.sample()
        if rate_over_s > 0:
            time.sleep(max(rate_over_s - (time.monotonic() - first.taken_at), 0.0))
        return dataclasses.replace(probe.status(), seconds=time.monotonic() - began)
