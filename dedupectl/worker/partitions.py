"""The input partitions a worker holds: each one's store, opened on assignment and closed on revocation, its
aging and gauges, and the status file that names them."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from dedupectl.config import WorkerConfig
from dedupectl.data_dir_faults import data_dir_fault, is_storage_io_error
from dedupectl.errors import DedupeError
from dedupectl.metrics import WorkerMetrics
from dedupectl.worker.summary import RunSummary
from reconcile.scan import OutputReader
from store.aging import AgingPolicy, age_step
from store.codec import StoreState
from store.dedup_store import DedupStore
from store.footprint import dir_bytes
from store.layout import store_path
from store.options import shared_memory
from store.window import effective_window_seconds
from store.worker_status import remove_status, status_path, write_status

log = logging.getLogger(__package__)  # one logger for the worker: operators' filters and alerts name it
NOTHING_TO_READ = "no output records to read"  # one wording for an empty stretch, at start and after recovery


@dataclass
class Partition:
    number: int
    store: DedupStore
    recovered: bool = False  # since its last assignment: only a recovered partition's batches are planned


class Partitions:
    """The partitions held, by number; ``assign`` and ``revoke`` follow the group's callbacks."""

    def __init__(self, config: WorkerConfig, metrics: WorkerMetrics, summary: RunSummary) -> None:
        self.config = config
        self.metrics = metrics
        self.summary = summary
        self._held: dict[int, Partition] = {}
        self._status_path = status_path(config.data_dir, config.worker_id)
        self._shared_memory = shared_memory(config.memtable_budget)  # for every held store
        self._aging = AgingPolicy(max_keys=config.max_keys, max_bytes=config.max_bytes)
        self.close_failures: list[BaseException] = []  # writes a stop owed and could not make

    def get(self, number: int) -> Partition | None:
        return self._held.get(number)

    def __contains__(self, number: int) -> bool:
        return number in self._held

    def __iter__(self) -> Iterator[Partition]:
        return iter(list(self._held.values()))

    def numbers(self) -> list[int]:
        return list(self._held)

    def stores(self) -> dict[int, DedupStore]:
        return {number: owned.store for number, owned in self._held.items()}

    def covered(self) -> dict[int, StoreState]:
        """Each held store's state: the input and output offsets it covers."""
        return {number: owned.store.state for number, owned in self._held.items()}

    def assign(self, numbers: Iterable[int], reader: OutputReader) -> None:
        """Open the stores of newly assigned partitions; every assigned one is to be recovered again, as another
        worker may have published while this one did not own it. ``reader`` tells an empty store's output."""
        numbers = list(numbers)
        for number in numbers:
            if number not in self._held:
                path = store_path(self.config.data_dir, self.config.input_topic, number)
                created = not path.exists()
                store = DedupStore.open(
                    path,
                    topic=self.config.input_topic,
                    partition=number,
                    shared=self._shared_memory,
                    window_ids=self.config.max_keys,  # the id filter is sized for what aging lets the store keep
                )
                self._held[number] = Partition(number, store)
                # an observer has no output to read back: its empty store is only its own start
                empty = created or (store.state.next_seq == 0 and store.state.output_offset < 0)
                if empty and not self.config.observe:
                    self._report_empty_store(number, created, reader)
                self.age(number, store)  # the window gauge exists from assignment on, input or not
            self._held[number].recovered = False
        log.info("assigned %s", sorted(numbers))
        self.write_status()

    def revoke(self, numbers: Iterable[int], *, closing: bool) -> None:
        numbers = list(numbers)
        for number in numbers:
            owned = self._held.pop(number, None)
            if owned is not None:
                self._close_store(owned.store, closing=closing)
                if not closing:  # a rebalance: its next owner exports its gauges, a stale copy would mislead
                    self.metrics.forget_store(number)
        log.info("revoked %s", sorted(numbers))
        self.write_status()

    def close_all(self) -> None:
        """At the end of the run, what the group's revocation left open."""
        for number in list(self._held):
            self._close_store(self._held.pop(number).store, closing=True)

    def _close_store(self, store: DedupStore, *, closing: bool) -> None:
        try:
            unsaved = store.close()
        except Exception as error:
            # at shutdown a failed volume must not cut the rest short: the store's next open replays its log
            if not (closing and is_storage_io_error(error)):
                raise
            log.warning("store %s was not closed cleanly (%s): its next open recovers it", store.path, error)
            unsaved = error
        # a full or failed volume is the operator's to hear about (exit 74), though the next open needs nothing
        if closing and unsaved is not None and data_dir_fault(unsaved, self.config.data_dir) is not None:
            self.close_failures.append(unsaved)

    def write_status(self) -> None:
        config = self.config
        fields = {"worker_id": config.worker_id, "group_id": config.group_id, "input_topic": config.input_topic}
        fields |= {"output_topic": config.output_topic, "partitions": sorted(self._held)}
        write_status(self._status_path, fields)
        self.summary.partitions = sorted(self._held)

    def remove_status(self) -> None:
        remove_status(self._status_path)

    def _report_empty_store(self, partition: int, created: bool, reader: OutputReader) -> None:
        """Say that a partition starts with no ids, and how much of the output its recovery will read."""
        label = str(partition)
        self.metrics.empty_stores.labels(label).inc()
        how = "a new empty store" if created else "an empty store"
        try:
            bounds = reader.bounds(self.config.output_topic, partition)
        except DedupeError as error:
            log.warning("partition %d starts from %s; output offsets unknown (%s)", partition, how, error)
            return
        self.metrics.recovery_offsets.labels(label).set(bounds.end - bounds.low)
        lost = (
            f"; offsets below {bounds.low} were deleted by retention: late retries of their ids will be published again"
            if bounds.low > 0
            else ""
        )
        if bounds.end <= bounds.low:
            log.info("partition %d starts from %s: %s (the output partition is empty)", partition, how, NOTHING_TO_READ)
            return
        log.info(
            "partition %d starts from %s: recovery reads the whole output partition, offsets %d..%d (%d)%s",
            partition,
            how,
            bounds.low,
            bounds.end,
            bounds.end - bounds.low,
            lost,
        )

    def maintain(self, consumer: Consumer) -> None:
        """Age every held partition, including those without input (their aged files still go), and refresh
        their window gauges, which grow with wall time."""
        for number, owned in list(self._held.items()):
            self.age(number, owned.store)
            self.metrics.store_bytes.labels(str(number)).set(dir_bytes(owned.store.path))
        self._measure_lag(consumer)
        self.metrics.measure_data_dir(self.config.data_dir)

    def _measure_lag(self, consumer: Consumer) -> None:
        """Records behind each held partition's end, from what fetches last told (no request to the broker)."""
        held = [TopicPartition(self.config.input_topic, number) for number in self._held]
        try:
            positions = consumer.position(held) if held else []
            for tp in positions:
                _, high = consumer.get_watermark_offsets(tp, cached=True)
                if tp.offset >= 0 and high >= 0:
                    self.metrics.lag.labels(str(tp.partition)).set(max(high - tp.offset, 0))
        except KafkaException as error:  # a gauge left a few seconds old is no reason to stop
            log.debug("lag not measured: %s", error)

    def age(self, partition: int, store: DedupStore) -> None:
        """One bounded aging step (microseconds: it moves the cut and drops whole generations below it), then the
        effective window for the gauge operators page on (NaN while the store holds no id)."""
        label = str(partition)
        result = age_step(store, self._aging)
        if result.aged:
            self.metrics.aged.labels(label).inc(result.aged)
            self.metrics.store_keys.labels(label).set(result.live_ids)
        window = effective_window_seconds(store)
        self.metrics.window_seconds.labels(label).set(math.nan if window is None else window)
        self.metrics.id_filter_bytes.labels(label).set(store.filter_bytes)
