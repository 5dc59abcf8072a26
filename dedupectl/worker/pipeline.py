"""The batch pipeline: collect a batch, plan it while the batch before commits, publish it, record the batch
before in its stores. A failed transaction rewinds the consumer to the committed offsets."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from contextlib import suppress
from dataclasses import replace
from operator import itemgetter

from confluent_kafka import KafkaException, Message

from dedupectl.config import WorkerConfig
from dedupectl.metrics import WorkerMetrics
from dedupectl.worker.clients import CONSUME_CHUNK, Clients
from dedupectl.worker.crashpoint import CrashPoint
from dedupectl.worker.duplicates import EarlierBatch, dropped_copies
from dedupectl.worker.partitions import Partition, Partitions
from dedupectl.worker.plan import Plan, Records, plan
from dedupectl.worker.publisher import CommitDone, InFlight, Outgoing, TransactionalPublisher
from dedupectl.worker.recovery import Recovery
from dedupectl.worker.routing import NOTHING_MISROUTED, RouteCheck
from dedupectl.worker.routing_log import RoutingLog
from dedupectl.worker.summary import RunSummary

log = logging.getLogger(__package__)  # one logger for the worker: operators' filters and alerts name it


class Pipeline:
    """Owns the batch committing (``in_flight``) and the consumer's rewinds."""

    def __init__(
        self,
        config: WorkerConfig,
        clients: Clients,
        partitions: Partitions,
        publisher: TransactionalPublisher,
        recovery: Recovery,
        metrics: WorkerMetrics,
        summary: RunSummary,
        crashpoint: CrashPoint,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.summary = summary
        self._clients = clients
        self._partitions = partitions
        self._publisher = publisher
        self._recovery = recovery
        self._crashpoint = crashpoint
        self.in_flight: InFlight | None = None  # the batch committing while the next one is collected
        self._rewinds = 0  # seeks back to the committed offsets so far: a batch collected across one is void
        # set once the input's partition count is known; until then (and with --partitioner any) nothing is checked
        self.routing = RouteCheck("any", 0)
        self._routing_log = RoutingLog(forwarding=config.misrouted == "forward")

    def collect(self) -> list[Message]:
        """Up to batch_max_messages / batch_max_bytes, waiting at most batch_max_ms."""
        config, consumer = self.config, self._clients.consumer
        deadline = time.monotonic() + config.batch_max_ms / 1000
        batch: list[Message] = []
        size = 0
        rewinds = self._rewinds
        while len(batch) < config.batch_max_messages and size < config.batch_max_bytes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            wanted = min(CONSUME_CHUNK, config.batch_max_messages - len(batch))
            got = consumer.consume(num_messages=wanted, timeout=remaining)
            records = got if not any(map(Message.error, got)) else self._clients.records_only(got)
            batch += records
            size += sum(map(len, filter(None, map(Message.value, records))))
            if len(got) < wanted:
                break
        if self._rewinds != rewinds:
            # a rebalance settled the batch committing and it was aborted: what this one holds may lie past
            # records the rewind reads again, so it goes, and the consumer reads from the committed offsets
            self._rewind()
            return []
        if batch and self.summary.first_consumed_at is None:
            self.summary.first_consumed_at = time.monotonic()
        return batch

    def process(self, batch: list[Message]) -> None:
        """Plan this batch while the one before commits, then publish it and record the one before.

        The batch committing (``in_flight``) is not in the stores yet: its ids count as held for this plan.
        Only once its commit is known to have succeeded is this batch published, and only then is the one
        before recorded, while this one commits. An aborted commit voids this batch too: the rewind reads both
        again from the committed offsets."""
        planned_at = time.perf_counter()
        by_partition: dict[int, list[Message]] = defaultdict(list)
        for message in batch:
            by_partition[message.partition()].append(message)
        # a partition revoked while the batch filled is left out: its next owner reads it from the committed offset
        owned_now = [owned for number in by_partition if (owned := self._partitions.get(number)) is not None]
        if not all(owned.recovered for owned in owned_now) and not self.finish_in_flight():
            return  # recovery waits until no transaction is open on the output, this worker's own included
        committed = self.in_flight
        seen = committed.seen if committed is not None else {}
        outgoing = []
        for owned in owned_now:
            if not owned.recovered:
                self._recovery.recover(owned)
            outgoing.append(self.plan(owned, by_partition[owned.number], seen.get(owned.number)))
        self.in_flight = None
        if self.routing.active:
            self._routing_log.summarise_if_due()
        done = None if committed is None else self._settle(committed)
        if committed is not None and done is None:
            return
        if self.config.duplicates_topic is not None:  # the originals of some are in the batch just committed
            outgoing = [self._with_copies(out, by_partition[out.plan.partition], committed) for out in outgoing]
        try:
            if outgoing:
                self.in_flight = self._publish(outgoing, planned_at)
        finally:
            if done is not None:
                self._record(committed, done)

    def plan(self, owned: Partition, messages: list[Message], seen: frozenset[bytes] | None = None) -> Outgoing:
        """``seen``: the store keys of the batch committing, held as if recorded."""
        records = Records(
            keys=list(map(Message.key, messages)),
            values=list(map(Message.value, messages)),
            offsets=list(map(Message.offset, messages)),
            timestamps_ms=list(map(itemgetter(1), map(Message.timestamp, messages))),
            headers=None if self.config.id_header is None else list(map(Message.headers, messages)),
        )
        check = self.routing.active
        routing = self.routing.check(owned.number, records.keys) if check else NOTHING_MISROUTED
        decided = plan(
            owned.number,
            records,
            owned.store,
            value_format=self.config.value_format,
            id_field=self.config.id_field,
            id_header=self.config.id_header,
            schemas=self.config.schemas,
            seen=seen,
            routing=routing,
            misrouted_dead=self.config.misrouted == "dead-letter",
            count_unkeyed=check,
            misrouted_forward=self.config.misrouted == "forward",
        )
        if routing.positions or decided.unkeyed:
            self._routing_log.note(owned.number, routing, records.keys, records.offsets, decided.unkeyed)
        return Outgoing.of(decided, messages)

    def _with_copies(self, out: Outgoing, messages: list[Message], committed: InFlight | None) -> Outgoing:
        """``out`` with the records its plan dropped, for the duplicates topic; ``committed``: the batch committed
        just before, settled and not yet recorded."""
        partition = out.plan.partition
        earlier = None
        for before in committed.batch if committed is not None else ():
            if before.plan.partition == partition:
                offsets = _published_at(before.plan, committed.spans.get(partition))
                earlier = EarlierBatch(before.plan.keys, offsets, before.plan.timestamps_ms)
        store = self._partitions.get(partition).store
        return replace(out, copies=dropped_copies(out.plan, messages, store, earlier))

    def _publish(self, outgoing: list[Outgoing], planned_at: float) -> InFlight | None:
        in_flight = self._publisher.publish(outgoing, planned_at)
        if in_flight is None:  # aborted: the batch is read again from the committed offsets
            self._rewind()
        return in_flight

    def _settle(self, in_flight: InFlight) -> CommitDone | None:
        done = self._publisher.settle(in_flight)
        if done is None:  # aborted: the batch is read again from the committed offsets
            self._rewind()
        return done

    def finish_in_flight(self) -> bool:
        """Settle and record the batch committing, if any; False when its commit failed and it was aborted (the
        consumer is then rewound to the committed offsets)."""
        in_flight, self.in_flight = self.in_flight, None
        if in_flight is None:
            return True
        done = self._settle(in_flight)
        if done is None:
            return False
        self._record(in_flight, done)
        return True

    def drop_in_flight(self, wait_s: float | None = None) -> None:
        """Forget the batch committing: the next recovery records it if it committed. ``wait_s``: how long
        its commit may still run first (the run is ending)."""
        in_flight, self.in_flight = self.in_flight, None
        if in_flight is not None and wait_s is not None:
            with suppress(Exception):
                in_flight.committed.exception(timeout=wait_s)
        self._publisher.open = False  # its outcome is the next recovery's (or the next producer's) to settle

    def _record(self, in_flight: InFlight, done: CommitDone) -> None:
        """Record a committed batch's ids in the stores of its partitions, then age them."""
        recording = time.perf_counter()
        for out in in_flight.batch:
            plan = out.plan
            owned = self._partitions.get(plan.partition)
            if owned is None:  # revoked meanwhile (its ids were recorded then): never reached, but never wrong
                continue
            span = in_flight.spans.get(plan.partition)
            state = owned.store.record(
                plan.ids,
                plan.timestamps_ms,
                keys=plan.keys,
                input_offset=plan.next_input_offset,
                output_offset=None if span is None else span[1] + 1,
                output_offsets=_published_at(plan, span),
            )
            self._account(plan, len(out.copies), state.next_seq - state.first_live_seq)
            self._partitions.age(plan.partition, owned.store)
        self._crashpoint("after-record")
        self.summary.batches += 1
        # the batch's own time: plan to commit, and its store write (not the next batch's collect between)
        self.metrics.batch_seconds.observe(done.perf - in_flight.planned_at + time.perf_counter() - recording)

    def _account(self, plan: Plan, copies: int, store_keys: int) -> None:
        label = str(plan.partition)
        published, dead = len(plan.ids), len(plan.dead)
        summary = self.summary
        summary.consumed += plan.consumed
        summary.published += published
        summary.duplicates += plan.duplicates
        summary.dead_letters += dead
        summary.misrouted += plan.misrouted
        summary.unkeyed += plan.unkeyed
        summary.duplicates_produced += copies
        metrics = self.metrics
        metrics.consumed.labels(label).inc(plan.consumed)
        metrics.published.labels(label).inc(published)
        metrics.duplicates.labels(label).inc(plan.duplicates)
        metrics.dead_letters.labels(label).inc(dead)
        if self.routing.active:  # exported at 0 once checked: an alert on their increase needs the series
            metrics.routing.misrouted.labels(label).inc(plan.misrouted)
            metrics.routing.unkeyed.labels(label).inc(plan.unkeyed)
        if self.config.duplicates_topic is not None:
            metrics.duplicates_produced.labels(label).inc(copies)
        metrics.store_keys.labels(label).set(store_keys)

    def _rewind(self) -> None:
        """Seek every held partition back to its committed offset: what was consumed past it is read again."""
        clients = self._clients
        committed = clients.retrying(
            lambda: clients.committed(self._partitions.numbers()),
            "reading the committed input offsets",
            # the group may need this consumer to poll before it answers (a rebalance after a broker restart)
            sleep=clients.poll_dropping,
        )
        self._rewinds += 1
        for tp in committed:
            if tp.partition in self._partitions:
                tp.offset = tp.offset if tp.offset >= 0 else 0
                try:
                    clients.consumer.seek(tp)
                except KafkaException as error:  # revoked meanwhile: its next owner re-reads it
                    log.info("not rewinding partition %d: %s", tp.partition, error)


def _published_at(plan: Plan, span: tuple[int, int] | None) -> range | None:
    """Each published id's output offset: one transaction of the only writer of the partition puts them
    at consecutive offsets. Should another producer have written in between, they are not known."""
    if span is None:
        return None
    if span[1] - span[0] != len(plan.ids) - 1:
        log.warning(
            "partition %d: %d records took output offsets %d..%d: another producer writes to the output "
            "partition; this batch is recorded without its offsets",
            plan.partition, len(plan.ids), span[0], span[1],
        )  # fmt: skip
        return None
    return range(span[0], span[1] + 1)
