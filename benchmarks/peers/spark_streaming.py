"""Spark Structured Streaming: ``dropDuplicatesWithinWatermark`` on the messageId, Kafka source to Kafka sink.

    spark.readStream.format("kafka")...load()
      .select(get_json_object(value, "$.messageId") AS messageId, value, partition, timestamp)
      .withWatermark("timestamp", WINDOW).dropDuplicatesWithinWatermark(["messageId"])
      .writeStream.format("kafka").option("checkpointLocation", STATE_DIR/checkpoint).start()

Through the project's own pyspark and Kafka connector jars (``dedupectl.spark``: the same session settings
as the Spark jobs, local[*]), with the RocksDB state store provider and one shuffle partition per input
partition. The watermark delay is the dedup window: an id is kept until event time has moved past it by that
much. The source reads read_committed from the earliest offset (then from the checkpoint); the default
trigger runs the next micro-batch as soon as the last one ends, over everything the input holds by then.
Output records are keyed by the messageId, carry the input value unchanged and go to the input's partition
number.

Spark's Kafka sink is at-least-once: a micro-batch's records are visible as soon as they are sent, and a
batch that had not committed to the checkpoint when the process died runs again after the restart. The
crash run of the benchmark shows how many duplicates that makes.

    python benchmarks/peers/spark_streaming.py BOOTSTRAP INPUT OUTPUT STATE_DIR [--window-seconds S]

Stops after ``--idle-seconds`` with no new data available (a micro-batch with data keeps it running).
Timing from Spark's own progress reports: from the start of the first micro-batch with input to the end of
the last one (its offsets and commit written to the checkpoint). Prints one JSON object (see ``_common.Progress``).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: import `benchmarks.peers` from the checkout, not siblings
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from benchmarks.peers._common import IdleClock, Progress, peak_rss_mb, peer_arguments
from benchmarks.peers._process_tree import tree_peak_rss_mb
from dedupectl.spark.jars import ensure_connector_jars
from dedupectl.spark.session import SparkSettings, spark_session

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
LISTENER_WAIT_S = 30.0  # for the last batch's progress event after the query stopped


def settings(partitions: int) -> SparkSettings:
    return SparkSettings(
        app_name="bench-spark-streaming",
        conf={
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
            "spark.sql.shuffle.partitions": str(partitions),  # fixed by the checkpoint from the first run on
        },
    )


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def progress_listener(progress: Progress) -> Any:
    from pyspark.sql.streaming import StreamingQueryListener

    class Batches(StreamingQueryListener):
        """Counts the input of each micro-batch and notes when the first with input began and the last ended."""

        last_batch_id = -1  # the events come from the JVM's listener bus, after the batches they report

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            batch = event.progress
            self.last_batch_id = max(self.last_batch_id, batch.batchId)
            if batch.numInputRows <= 0:
                return
            began = _epoch(batch.timestamp)
            if progress.first_consumed_at is None:
                progress.first_consumed_at = began
            progress.consumed += batch.numInputRows
            progress.last_consumed_at = progress.last_committed_at = began + batch.batchDuration / 1000

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return Batches()


def _wait_for_events(listener: Any, last_progress: dict | None) -> None:
    """Until the listener has had the last batch's event (a loaded machine delivers them late), at most
    ``LISTENER_WAIT_S``."""
    deadline = time.monotonic() + LISTENER_WAIT_S
    while last_progress and listener.last_batch_id < last_progress["batchId"] and time.monotonic() < deadline:
        time.sleep(0.1)


def start_query(spark: Any, args: argparse.Namespace) -> Any:
    from pyspark.sql import functions as F

    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input_topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    message_id = F.get_json_object(F.col("value").cast("string"), "$.messageId")
    deduplicated = (
        source.select(message_id.alias("messageId"), "value", "partition", "timestamp")
        .where(F.col("messageId").isNotNull())
        .withWatermark("timestamp", f"{args.window_seconds} seconds")
        .dropDuplicatesWithinWatermark(["messageId"])
        .select(F.col("messageId").cast("binary").alias("key"), "value", "partition")
    )
    return (
        deduplicated.writeStream.format("kafka")
        .queryName("dedup")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output_topic)
        .option("checkpointLocation", str(Path(args.state_dir).resolve() / "checkpoint"))
        .start()
    )


def run(args: argparse.Namespace) -> Progress:
    progress = Progress()
    jars = ensure_connector_jars()
    with spark_session(settings(args.partitions), jars) as (spark, _):
        listener = progress_listener(progress)
        spark.streams.addListener(listener)
        query = start_query(spark, args)
        idle = IdleClock(args.idle_seconds)
        while query.isActive:
            # not isTriggerActive: with the default trigger, polling for new data is a trigger too
            if query.status["isDataAvailable"]:
                idle.active()
            elif idle.expired():
                break
            time.sleep(0.2)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()).strip().splitlines()[0])
        query.stop()
        _wait_for_events(listener, query.lastProgress)
        # the JVM (a child of this process) is still up: its peak counts; the sink reports no record count
        progress.emit(peak_rss_mb=tree_peak_rss_mb(), driver_peak_rss_mb=peak_rss_mb(), spark_version=spark.version)
    return progress


def main() -> None:
    parser = peer_arguments(__doc__, "state_dir")
    parser.add_argument("--window-seconds", type=int, default=24 * 3600, help="watermark delay: how long an id is kept")
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--partitions", type=int, default=4, help="shuffle partitions: one per input partition")
    args = parser.parse_args()
    try:
        run(args)
    except Exception as error:  # a Py4J error carries the Java stack trace: its first line says what failed
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        sys.stderr.write(f"the Spark query failed: {first}\n")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
