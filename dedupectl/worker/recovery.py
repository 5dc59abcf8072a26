"""Making a partition's store agree with its output partition again: recovery on every assignment (once no
transaction is open on the output), and the sweep that aborts what an earlier producer of this worker's id
left open at start and after a failed transaction."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from confluent_kafka import KafkaException, TopicPartition

from dedupectl.config import WorkerConfig
from dedupectl.errors import BrokerError, OutputGapError
from dedupectl.metrics import WorkerMetrics
from dedupectl.worker.clients import Clients, produce_when_room
from dedupectl.worker.partitions import NOTHING_TO_READ, Partition
from dedupectl.worker.summary import RunSummary
from reconcile.broker_retry import describe
from reconcile.recovery import CatchUpResult, catch_up
from reconcile.scan import OffsetBounds, OutputReader
from store.codec import StoreState

log = logging.getLogger(__package__)  # one logger for the worker: operators' filters and alerts name it

SETTLE_MARGIN_S = 30.0  # beyond twice transaction.timeout.ms: the coordinator's abort sweep and marker writes
SWEEP_HEADER = "dedupectl-abort-sweep"  # the empty record of a transaction that only aborts what was left open


class Recovery:
    """Owns the output reader; reads through it, and sweeps through the clients' producer."""

    def __init__(self, config: WorkerConfig, clients: Clients, metrics: WorkerMetrics, summary: RunSummary) -> None:
        self.config = config
        self.metrics = metrics
        self.summary = summary
        self._clients = clients
        self.reader: OutputReader | None = None

    def connect(self) -> None:
        self.reader = OutputReader(self.config.kafka)

    def reconnect(self) -> None:
        self.reader.close()
        self.reader = OutputReader(self.config.kafka)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()

    def recover_assigned(self, partitions: Iterable[Partition]) -> bool:
        """Recover every partition assigned and not recovered yet (no transaction of this worker's is open);
        whether there was any."""
        waiting = [owned for owned in partitions if not owned.recovered]
        for owned in waiting:
            self.recover(owned)
        return bool(waiting)

    def recover(self, owned: Partition) -> None:
        if self.config.observe:  # it published nothing: there is no output to agree with
            owned.recovered = True
            return
        began = time.monotonic()
        bounds: OffsetBounds | None = self._await_settled_output(owned.number)

        def attempt():
            nonlocal bounds
            # the first attempt reads from the bounds the wait has just seen; a retry asks for them again
            known, bounds = bounds, None
            # a long recovery blocks the loop: its batches keep the liveness heartbeat going
            beat = lambda _scanned, _recorded: self.metrics.beat()  # noqa: E731
            return catch_up(
                owned.store, self.reader, self.config.output_topic, owned.number, bounds=known, progress=beat
            )

        try:
            result = self._clients.retrying(attempt, f"recovering partition {owned.number} from the output")
        except OutputGapError as refused:  # no retry or exact way on: the worker exits with the error's one line
            self.metrics.refused.labels(str(owned.number), refused.gap.kind).set(1)
            raise
        owned.recovered = True
        self.summary.recovered += result.recorded
        self.metrics.recovered.labels(str(owned.number)).inc(result.recorded)
        self.metrics.recovery_offsets.labels(str(owned.number)).set(result.end_offset - max(result.start_offset, 0))
        self.metrics.recovery_seconds.labels(str(owned.number)).set(time.monotonic() - began)
        log.info("%s", recovered_line(owned.number, result))

    def _await_settled_output(self, partition: int) -> OffsetBounds:
        """Wait until no transaction is open on the output partition before recovery reads it; return its
        bounds as last read. One still open (a former owner's, or this worker's last one while the coordinator
        settles it after a broker fault) could commit after recovery has read up to it, and its ids would be
        missing from the store. The coordinator ends any transaction within transaction.timeout.ms; one open
        much longer is hanging."""
        topic = self.config.output_topic
        limit_s = 2 * self.config.transaction_timeout_ms / 1000 + SETTLE_MARGIN_S
        began = time.monotonic()
        delay = 0.1
        while True:
            bounds, end = self._open_span(partition)
            stable = bounds.end
            if stable >= end:
                return bounds
            waited = time.monotonic() - began
            if waited >= limit_s:
                raise BrokerError(
                    f"a transaction has been open on {topic}[{partition}] for {waited:.0f}s (offsets {stable}..{end})"
                    ": recovery cannot know whether its records will count",
                    "find and abort the hanging transaction (kafka-transactions.sh find-hanging, then abort), "
                    "then restart the worker",
                )
            if delay == 0.1:
                log.info("partition %d: waiting for an open transaction on the output to end", partition)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _open_span(self, partition: int) -> tuple[OffsetBounds, int]:
        """The output partition's bounds (up to its last stable offset) and its end: the end equals the last
        stable offset unless a transaction is open on it."""
        topic, reader, retrying = self.config.output_topic, self.reader, self._clients.retrying
        bounds = retrying(lambda: reader.bounds(topic, partition), "reading the output's stable end")
        return bounds, retrying(lambda: reader.log_end(topic, partition), "reading the output's end")

    def sweep(self, covered: dict[int, StoreState], *, commit_requested: bool = False) -> None:
        """Right after new clients start, before the consumer joins the group: abort what the earlier producer
        may have left open (see ``_abort_what_was_left_open``). ``covered``: the partitions held before, each
        with its store's state (the input and output offsets it covers), whose outputs may be swept;
        ``commit_requested``: whether the failed transaction had asked to commit, so that only partitions whose
        failed batch the group did not commit are swept."""
        if self.config.observe:  # it writes no output partition: only what it left pending in its group
            covered = {}
        if commit_requested:
            self._abort_what_was_left_open({})  # the group's pending offsets first: its committed ones then read
            uncommitted = self._batches_not_committed(covered)
            self._abort_what_was_left_open({number: covered[number].output_offset for number in uncommitted})
        else:
            self._abort_what_was_left_open({number: state.output_offset for number, state in covered.items()})

    def _batches_not_committed(self, covered: dict[int, StoreState]) -> list[int]:
        """The partitions whose group offset is not past what their store covers: the failed transaction's batch
        of them was not committed (it is read again), so records of it left open may be aborted. With its
        offsets committed, its records were meant to count: they are left alone (recovery then waits for them)."""
        try:
            committed = self._clients.committed(covered)
        except KafkaException as error:
            log.warning("cannot read the group's committed offsets (%s): no output partition is swept", describe(error))
            return []
        return sorted(
            tp.partition for tp in committed if tp.error is None and tp.offset <= covered[tp.partition].input_offset
        )

    def _abort_what_was_left_open(self, outputs: dict[int, int]) -> None:
        """End as aborted what an earlier producer of this worker's id left open that a broker still holds: at
        start, and after a failed transaction. A broker that crashed mid-transaction can lose the markers its
        coordinator sends: the group then keeps the transaction's offsets pending (its committed offsets never
        become stable, so the consumer never starts), and an output partition keeps its records open (its last
        stable offset stuck below its end). One transaction of this producer's id that sends offsets to the
        group and writes an empty record to each of ``outputs`` left open (never visible to read_committed
        readers), then aborts, makes the brokers close what this id left open there. ``outputs`` maps each
        partition to the output offset its store covers: records open from below it belong to a batch the
        store recorded as committed (a commit whose markers the broker lost), and are never aborted; recovery
        then refuses to read past them.

        Pending offsets are always safe to drop: the batch is read again and recovery, which reads the output,
        drops what was published. Open output records only where the failed batch is read again (see
        ``sweep``): then nothing of them can have been meant to count."""
        config, producer, retrying = self.config, self._clients.producer, self._clients.retrying
        open_outputs = []
        for number, covered in sorted(outputs.items()):
            bounds, end = self._open_span(number)
            stable = bounds.end
            if stable < end and stable >= covered:
                open_outputs.append((number, stable, end))
            elif stable < end:
                log.warning(
                    "partition %d: output offsets %d..%d are still open from below what its store covers (%d): a "
                    "committed batch whose markers the broker lost, left alone",
                    number,
                    stable,
                    end,
                    covered,
                )
        for number, stable, end in open_outputs:
            log.warning(
                "partition %d: output offsets %d..%d are still open after the failed transaction: aborting them",
                number,
                stable,
                end,
            )
        retrying(producer.begin_transaction, "beginning a transaction")
        for number, _, _ in open_outputs:
            produce_when_room(producer, config.output_topic, None, None, number, headers=[(SWEEP_HEADER, b"")])
        # delivered before the abort: an abort discards what is unsent, and its markers reach only what it wrote to
        producer.flush(config.kafka.timeout_s)
        # offsets of an aborted transaction never count: any valid offset makes the group's marker come
        offsets = [TopicPartition(config.input_topic, number, 0) for number in sorted(outputs) or [0]]
        try:
            retrying(
                lambda: producer.send_offsets_to_transaction(
                    offsets, self._clients.consumer.consumer_group_metadata(), config.kafka.timeout_s
                ),
                "sending offsets to the aborting transaction",
            )
        except KafkaException as error:
            # the group refuses the offsets of a consumer that has not joined yet (unknown member), but the
            # transaction holds the group's partition by then, so its abort marker still reaches it; the records
            # are produced first, as the refusal leaves the transaction able only to abort
            if not error.args[0].txn_requires_abort():
                raise
            log.debug("offsets of the aborting transaction refused (%s): aborting it", describe(error))
        retrying(lambda: producer.abort_transaction(config.kafka.timeout_s), "aborting the transaction")


def recovered_line(partition: int, result: CatchUpResult) -> str:
    """The log line of a finished recovery; with nothing to read, the same words as an empty store's start."""
    if result.end_offset <= result.start_offset:
        return f"partition {partition} recovered: {NOTHING_TO_READ} past what its store covers"
    return (
        f"partition {partition} recovered: read output offsets {result.start_offset}..{result.end_offset} "
        f"({result.scanned} records), recorded {result.recorded} missing ids"
    )
