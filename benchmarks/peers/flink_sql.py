"""Apache Flink: the SQL deduplication query (first row per messageId) in a local mini-cluster, through PyFlink.

    INSERT INTO output SELECT messageId, value FROM (
      SELECT ..., ROW_NUMBER() OVER (PARTITION BY messageId ORDER BY proctime) AS row_num FROM input
    ) WHERE row_num = 1

Flink plans this as its keep-first-row deduplication operator, whose output is append-only. Settings, as the
Flink documentation gives them for exactly-once Kafka output: the RocksDB state backend with incremental
checkpoints every ``--checkpoint-ms`` (retained on cancellation, so a restarted process can restore the last
one) with bloom filters on its SST files (``state.backend.rocksdb.use-bloom-filter``, off by default; Kafka
Streams' stores have them) and 1 GB of managed memory for RocksDB (``taskmanager.memory.managed.size``; the
mini-cluster's default is too small for the state of a 10M-event run), the Kafka sink with
``sink.delivery-guarantee = exactly-once`` (one transaction per checkpoint), the source reading read_committed
from the group's offsets (earliest when it has none), and the state TTL (``table.exec.state.ttl``) set to the
dedup window. The messageId is extracted from the JSON value; the output record is keyed by it and carries the
input value unchanged. Parallelism: the mini-cluster's default, one slot per core.

The source is bounded at the input's end as of the start (``scan.bounded.mode = latest-offset``), so the job
finishes by itself: its last checkpoint commits the last transaction, then the process exits. A restart
finds the newest retained checkpoint under STATE_DIR and resumes from it (``execution.state-recovery.path``),
as a restarted job would; the Kafka sink aborts what the killed attempt left open. With ``--unbounded`` the
source follows the input (records still arriving: the latency run) and the job runs until it is stopped.

    python benchmarks/peers/flink_sql.py BOOTSTRAP INPUT OUTPUT STATE_DIR --connector-jar JAR [--group G]

Runs in the Flink peer's own virtualenv (benchmarks/.venv-flink), not the project's. Timing from outside the
job, on this process's clock (Flink's SQL job has no per-record hook that would not slow it): the first
record consumed is taken as the moment the first output record is written (uncommitted), the last commit as
the moment the output's last stable offset last moved; records consumed are the input from the group's
committed offsets at start to its end. Prints one JSON object (see ``_common.Progress``).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import `benchmarks.peers` from the checkout, not siblings
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from confluent_kafka import Consumer, TopicPartition

from benchmarks.peers._common import SESSION_TIMEOUT_MS, Progress, peak_rss_mb, peer_arguments
from benchmarks.peers._process_tree import dir_bytes, tree_peak_rss_mb


def _probe(bootstrap: str, isolation: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-flink-probe", "isolation.level": isolation})


def _ends(consumer: Consumer, topic: str) -> list[int]:
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in sorted(partitions)]


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return [max(tp.offset, 0) for tp in found]
    finally:
        consumer.close()


class OutputWatch(threading.Thread):
    """Notes when the output first grows (records written, committed or not) and when its last stable offset
    last moved (a transaction committed); samples the sizes of the checkpoints and of the live RocksDB
    directories on the way (Flink deletes both when the job finishes)."""

    def __init__(self, bootstrap: str, topic: str, state_dir: Path, progress: Progress) -> None:
        super().__init__(daemon=True)
        self._uncommitted, self._committed = _probe(bootstrap, "read_uncommitted"), _probe(bootstrap, "read_committed")
        self._topic, self._state_dir, self._progress = topic, state_dir, progress
        self._start = sum(_ends(self._uncommitted, topic))
        self._stable = sum(_ends(self._committed, topic))
        self.checkpoint_bytes = self.rocksdb_bytes = 0  # their last sizes while they had any
        self._halt = threading.Event()

    def run(self) -> None:
        next_size = 0.0
        while not self._halt.is_set():
            self._look()
            if time.monotonic() >= next_size:
                self.checkpoint_bytes = dir_bytes(self._state_dir / "checkpoints") or self.checkpoint_bytes
                self.rocksdb_bytes = dir_bytes(self._state_dir / "rocksdb") or self.rocksdb_bytes
                next_size = time.monotonic() + 0.5
            self._halt.wait(0.05)

    def _look(self) -> None:
        now = time.time()
        if self._progress.first_consumed_at is None and sum(_ends(self._uncommitted, self._topic)) > self._start:
            self._progress.first_consumed_at = now
        stable = sum(_ends(self._committed, self._topic))
        if stable > self._stable:
            self._stable = stable
            self._progress.last_committed_at = now

    def stop(self) -> None:
        self._halt.set()
        self.join(30)
        self._look()  # the final commit, if it landed after the last look
        self._uncommitted.close()
        self._committed.close()


def latest_checkpoint(checkpoints: Path) -> Path | None:
    """The newest completed checkpoint (``chk-N`` with its ``_metadata``) of any earlier run, if any."""
    done = [meta.parent for meta in checkpoints.glob("*/chk-*/_metadata")]
    return max(done, key=lambda chk: (chk.stat().st_mtime, int(chk.name.removeprefix("chk-"))), default=None)


def configuration(args: argparse.Namespace, state_dir: Path, restore: Path | None) -> dict[str, str]:
    config = {
        "pipeline.jars": Path(args.connector_jar).resolve().as_uri(),
        "pipeline.name": f"dedup {args.input_topic} -> {args.output_topic}",
        "state.backend.type": "rocksdb",
        "state.backend.rocksdb.localdir": str(state_dir / "rocksdb"),
        "execution.checkpointing.dir": (state_dir / "checkpoints").resolve().as_uri(),
        "execution.checkpointing.interval": f"{args.checkpoint_ms} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.incremental": "true",
        "state.backend.rocksdb.use-bloom-filter": "true",  # nearly every state read is of a new id
        # RocksDB's block cache and memtables live in managed memory: once the state outgrows the mini-cluster's
        # small default, each state read goes to the files (docs/benchmarks.md, "dedupectl against its peers")
        "taskmanager.memory.managed.size": "1g",
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "table.exec.state.ttl": f"{args.window_seconds} s",
        "restart-strategy.type": "fixed-delay",  # a broken setup fails the run instead of restarting forever
        "restart-strategy.fixed-delay.attempts": "3",
    }
    if restore is not None:
        config["execution.state-recovery.path"] = restore.resolve().as_uri()
    return config


def statements(args: argparse.Namespace, group: str) -> tuple[str, str, str]:
    kafka = f"'connector' = 'kafka', 'properties.bootstrap.servers' = '{args.bootstrap}'"
    bounded = "" if args.unbounded else ", 'scan.bounded.mode' = 'latest-offset'"
    source = f"""
        CREATE TEMPORARY TABLE input (`value` BYTES, proctime AS PROCTIME()) WITH (
          {kafka}, 'topic' = '{args.input_topic}', 'format' = 'raw',
          'properties.group.id' = '{group}', 'scan.startup.mode' = 'group-offsets',
          'properties.auto.offset.reset' = 'earliest', 'properties.isolation.level' = 'read_committed',
          'properties.session.timeout.ms' = '{SESSION_TIMEOUT_MS}'{bounded})"""
    sink = f"""
        CREATE TEMPORARY TABLE output (`key` BYTES, `value` BYTES) WITH (
          {kafka}, 'topic' = '{args.output_topic}',
          'key.format' = 'raw', 'key.fields' = 'key', 'value.format' = 'raw', 'value.fields-include' = 'EXCEPT_KEY',
          'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = '{group}',
          'properties.transaction.timeout.ms' = '{args.transaction_timeout_ms}')"""
    dedup = """
        INSERT INTO output
        SELECT CAST(message_id AS BYTES), `value` FROM (
          SELECT message_id, `value`,
                 ROW_NUMBER() OVER (PARTITION BY message_id ORDER BY proctime ASC) AS row_num
          FROM (SELECT JSON_VALUE(CAST(`value` AS STRING), '$.messageId') AS message_id, `value`, proctime
                FROM input)
          WHERE message_id IS NOT NULL)
        WHERE row_num = 1"""
    return source, sink, dedup


def run(args: argparse.Namespace) -> tuple[Progress, OutputWatch]:
    """Run the job to its end; its progress, and the watch that saw it."""
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    state_dir = Path(args.state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    group = args.group or f"bench-flink-{args.output_topic}"
    probe = _probe(args.bootstrap, "read_committed")
    try:
        ends = _ends(probe, args.input_topic)
    finally:
        probe.close()
    progress = Progress()
    progress.consumed = sum(ends) - sum(_committed(args.bootstrap, group, args.input_topic, len(ends)))

    config = Configuration()
    for key, value in configuration(args, state_dir, latest_checkpoint(state_dir / "checkpoints")).items():
        config.set_string(key, value)
    settings = EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(config).build()
    tables = TableEnvironment.create(settings)
    source, sink, dedup = statements(args, group)
    tables.execute_sql(source)
    tables.execute_sql(sink)
    watch = OutputWatch(args.bootstrap, args.output_topic, state_dir, progress)
    watch.start()
    try:
        tables.execute_sql(dedup).wait()
    finally:
        watch.stop()
    return progress, watch


def main() -> None:
    parser = peer_arguments(__doc__, "state_dir")
    parser.add_argument("--connector-jar", required=True, help="flink-sql-connector-kafka for this Flink")
    parser.add_argument("--group", default="", help="consumer group and transactional-id prefix")
    parser.add_argument("--window-seconds", type=int, default=24 * 3600, help="state TTL: how long an id is kept")
    parser.add_argument("--checkpoint-ms", type=int, default=1000, help="checkpoint (and transaction) interval")
    parser.add_argument("--unbounded", action="store_true", help="follow the input: run until stopped")
    parser.add_argument("--transaction-timeout-ms", type=int, default=60_000, help="below the broker's maximum")
    args = parser.parse_args()
    try:
        progress, watch = run(args)
    except Exception as error:  # a Py4J error carries the Java stack trace: its first line says what failed
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        sys.stderr.write(f"the Flink job failed: {first}\n")
        raise SystemExit(1) from None
    import pyflink.version

    # the JVM (a child of this process) is still up: its peak counts
    progress.emit(
        peak_rss_mb=tree_peak_rss_mb(),
        driver_peak_rss_mb=peak_rss_mb(),
        state_bytes=watch.checkpoint_bytes,  # the state it recovers from, as Spark's checkpoint
        rocksdb_bytes=watch.rocksdb_bytes,
        flink_version=pyflink.version.__version__,
    )


if __name__ == "__main__":
    main()
