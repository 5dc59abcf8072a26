"""The second half of ``dedupectl rebuild``: the numbered records into sorted SST files, one pair per bucket.

The sequence is cut into buckets (``store.bulk_load.LoadLayout``); a Python task writes each bucket's
``ids`` and ``times`` files with ``store.bulk_load`` (every key and value from ``store.codec``): ``times``
takes every number, ``ids`` the ids held under them (not those recorded again under a later number). Two
ways to get a bucket's records to its task:

- local master (the executors share the driver's disk): Spark writes each bucket's lines into a folder of
  its own, each file sorted by id, without a shuffle; one task per bucket reads its folder and writes the
  files straight into the staging folder. Handing over and writing are timed apart.
- cluster: each bucket's lines travel to one task as one value, and the finished SST files come back to
  the driver in chunks, one task at a time.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dedupectl.spark import rebuild_lines
from store import bulk_load

CHUNK_BYTES = 8 * 1024 * 1024  # SST files travel to the driver in pieces this big (cluster masters)


def bucket_count(numbers: int, layout: bulk_load.LoadLayout) -> int:
    return layout.bucket_of(numbers - 1) + 1 if numbers else 0


def _bucketed(numbered: DataFrame, layout: bulk_load.LoadLayout) -> DataFrame:
    """(bucket, line) for each numbered record: the line holds its place in the bucket, timestamp, output
    offset, whether its id is held there, and the id."""
    bucket = F.floor(F.col("seq") / layout.bucket_ids).cast("long")
    place = F.col("seq") - bucket * layout.bucket_ids
    line = rebuild_lines.line(F.col("id"), place, F.col("timestamp_ms"), F.col("offset"), F.col("held"))
    return numbered.select(bucket.alias("bucket"), line.alias("line"))


def _write_lines(
    directory: Path,
    bucket: int,
    lines: rebuild_lines.Lines,
    numbers: int,
    layout: bulk_load.LoadLayout,
    with_offsets: bool = True,
) -> bulk_load.BucketFiles:
    """One bucket's SST files from its parsed lines (``numbers``: the store's next sequence number);
    ``with_offsets``: the lines' offsets are the store's output partition's (else ``times`` holds none)."""
    return bulk_load.write_bucket_places(
        directory,
        bucket,
        lines.places,
        lines.ids,
        lines.stamps,
        numbers,
        layout,
        offsets=lines.offsets if with_offsets else None,
        held=lines.held,
    )


def hand_over(numbered: DataFrame, staging: Path, numbers: int, layout: bulk_load.LoadLayout) -> list[tuple[int, str]]:
    """Local master: Spark writes each bucket's lines into a folder of its own, each file sorted by id;
    returns (bucket, folder) for each bucket.

    No shuffle: each task writes its part of every bucket it holds, one file per bucket, all open at once
    (else Spark would sort the rows by bucket first, undoing the order by id). The order is RocksDB's for a
    bucket of one shape of id: ``ajs-`` ids sort as their keys do once their common prefix is left out (Spark
    compares 8-byte prefixes first: "ajs-" would waste half of each); the SST writer checks the order and
    sorts whatever is not in it."""
    text_dir = staging / "text"
    message_id = F.col("id")
    unprefixed = F.when(F.substring(message_id, 1, 4) == F.lit(b"ajs-"), F.substring(message_id, 5, 1 << 30))
    ordered = numbered.sortWithinPartitions(F.coalesce(unprefixed, message_id))
    unsorted_writes = {
        "spark.sql.optimizer.plannedWrite.enabled": "false",
        "spark.sql.maxConcurrentOutputFileWriters": str(bucket_count(numbers, layout) + 1),
    }
    with _session_conf(numbered.sparkSession, unsorted_writes):
        _bucketed(ordered, layout).write.partitionBy("bucket").text(str(text_dir))
    return [(int(folder.name.split("=", 1)[1]), str(folder)) for folder in sorted(text_dir.glob("bucket=*"))]


@contextmanager
def _session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """SQL settings for one action, restored afterwards (the session may be the caller's)."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def write_handed_over(
    spark: SparkSession,
    folders: list[tuple[int, str]],
    sst_dir: Path,
    numbers: int,
    layout: bulk_load.LoadLayout,
    with_offsets: bool = True,
) -> list[bulk_load.BucketFiles]:
    """Local master: one task per bucket writes its SST files into ``sst_dir`` from its folder of lines."""
    write = partial(_write_folder, target=str(sst_dir), numbers=numbers, layout=layout, with_offsets=with_offsets)
    written = spark.sparkContext.parallelize(folders, len(folders)).map(write).collect()
    return [
        bulk_load.BucketFiles(b, first, count, None if i is None else Path(i), Path(t))
        for b, first, count, i, t in written
    ]


def _write_folder(
    job: tuple[int, str], target: str, numbers: int, layout: bulk_load.LoadLayout, with_offsets: bool = True
) -> tuple[int, int, int, str | None, str]:
    """Executor side (local master): the SST files of one bucket from the files Spark wrote for it."""
    bucket, folder = job
    lines = rebuild_lines.parse([part.read_bytes() for part in sorted(Path(folder).glob("part-*"))])
    files = _write_lines(Path(target), bucket, lines, numbers, layout, with_offsets)
    ids_path = None if files.ids_path is None else str(files.ids_path)
    return bucket, files.first_seq, files.count, ids_path, str(files.times_path)


def write_shipped(
    numbered: DataFrame, sst_dir: Path, numbers: int, layout: bulk_load.LoadLayout, with_offsets: bool = True
) -> list[bulk_load.BucketFiles]:
    """Cluster: each bucket's lines travel to one task as one value (the buckets spread over the tasks by
    routing keys), and the finished SST files back to the driver in chunks, one task at a time."""
    sst_dir.mkdir(parents=True, exist_ok=True)
    count = bucket_count(numbers, layout)
    routes = F.array(*[F.lit(key).cast("long") for key in _routing_keys(numbered.sparkSession, count)])
    texts = (
        _bucketed(numbered, layout)
        .withColumn("route", F.element_at(routes, F.col("bucket").cast("int") + 1))
        .repartition(count, "route")  # bucket b goes to task b: each writes one bucket, all in parallel
        .groupBy("route", "bucket")  # already partitioned by route: no further shuffle
        .agg(F.concat(F.concat_ws("\n", F.collect_list("line")), F.lit("\n")).cast("binary").alias("lines"))
        .select("bucket", "lines")
    )
    buckets, handles = [], {}
    ship = partial(_ship_buckets, numbers=numbers, layout=layout, with_offsets=with_offsets)
    produced = texts.rdd.mapPartitions(ship)
    for item in produced.toLocalIterator(prefetchPartitions=True):
        if item[0] == "chunk":
            _, name, data = item
            handle = handles.get(name) or handles.setdefault(name, open(sst_dir / name, "wb"))  # noqa: SIM115
            handle.write(data)
        else:
            _, bucket, first, ids, ids_name, times_name = item
            for name in (ids_name, times_name):
                if name is not None:
                    handles.pop(name).close()
            ids_path = None if ids_name is None else sst_dir / ids_name
            buckets.append(bulk_load.BucketFiles(bucket, first, ids, ids_path, sst_dir / times_name))
    return buckets


def _routing_keys(spark: SparkSession, count: int) -> list[int]:
    """For each of ``count`` tasks, a number that Spark's hash partitioning sends to exactly that task.

    Partitioning by the bucket number itself would hash several buckets to one task (and leave others idle);
    partitioning by range would sample the data first, recomputing its sequence numbers."""
    keys: dict[int, int] = {}
    start = 0
    while len(keys) < count:
        candidates = spark.range(start, start + 16 * count).select(
            "id", F.pmod(F.hash(F.col("id")), F.lit(count)).alias("task")
        )
        for row in candidates.collect():
            keys.setdefault(row["task"], row["id"])
        start += 16 * count
    return [keys[task] for task in range(count)]


def _ship_buckets(
    rows: Iterator[Any], numbers: int, layout: bulk_load.LoadLayout, with_offsets: bool = True
) -> Iterator[tuple[Any, ...]]:
    """Executor side (cluster): write each bucket's SST files in local scratch space and send them back in
    chunks, then one row saying which bucket they were."""
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-sst-"))
    try:
        for bucket, lines in rows:
            files = _write_lines(scratch, bucket, rebuild_lines.parse([bytes(lines)]), numbers, layout, with_offsets)
            for path in (files.ids_path, files.times_path):
                if path is None:
                    continue
                with open(path, "rb") as handle:
                    while data := handle.read(CHUNK_BYTES):
                        yield ("chunk", path.name, data)
                path.unlink()
            ids_name = None if files.ids_path is None else files.ids_path.name
            yield ("bucket", bucket, files.first_seq, files.count, ids_name, files.times_path.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
