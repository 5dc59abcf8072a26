"""Stores that already hold many ids, made fast for benchmarks: random ``ajs-`` ids bulk loaded as
``dedupectl rebuild`` loads a store (``store.bulk_load``), a bucket of sorted ids per SST file."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from benchmarks.without_sealed_arrays import no_sealed_arrays
from store.bulk_load import LoadLayout, ingest, write_bucket_places
from store.clock import now_ms
from store.codec import StoreState
from store.filter_keeper import FILTER_FILE
from store.generation_arrays import SUFFIX
from store.layout import store_path

_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def random_ajs_ids(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` random ``ajs-`` + 32 hex ids as one array of 36-byte strings (no Python object per id)."""
    raw = rng.integers(0, 256, (count, 16), dtype=np.uint8)
    text = np.empty((count, 36), np.uint8)
    text[:, :4] = np.frombuffer(b"ajs-", np.uint8)
    text[:, 4::2] = _HEX[raw >> 4]
    text[:, 5::2] = _HEX[raw & 15]
    return text.view("S36").ravel()


def bucket_ids(seed: int, bucket: int, size: int) -> np.ndarray:
    """The ids ``bulk_load_store`` puts in one bucket (each bucket has its own generator: any one can be
    made again to look its ids up)."""
    return random_ajs_ids(np.random.default_rng([seed, bucket]), size)


def bulk_load_store(
    path: Path,
    *,
    topic: str,
    partition: int,
    count: int,
    layout: LoadLayout,
    seed: int,
    window_ids: int | None = None,
    on_bucket=None,
) -> float:
    """Make a store of ``count`` random ids at ``path`` (timestamps over the last hour, no offsets covered)
    with its id filter built and saved; returns the seconds it took."""
    started = time.monotonic()
    staging = path.with_name(f".{path.name}.staging")
    now = now_ms()
    buckets = []
    for bucket in range(-(-count // layout.bucket_ids)):
        size = min(layout.bucket_ids, count - bucket * layout.bucket_ids)
        ids = bucket_ids(seed, bucket, size)
        order = np.argsort(ids, kind="stable")  # an SST file takes its keys in order
        stamps = now - 3_600_000 + (bucket * layout.bucket_ids + order) * 3_600_000 // count
        buckets.append(write_bucket_places(staging, bucket, order, ids[order].view("V36"), stamps, count, layout))
        if on_bucket is not None:
            on_bucket(bucket * layout.bucket_ids + size)
    store = ingest(
        path, topic=topic, partition=partition, buckets=buckets, state=StoreState(next_seq=count), window_ids=window_ids
    )
    store.close()
    shutil.rmtree(staging, ignore_errors=True)
    return time.monotonic() - started


PREFILL_LAYOUT = LoadLayout(batch_ids=10_000, bucket_ids=2_000_000)


def prefill_data_dir(data_dir: Path, topic: str, partitions: int, total: int) -> float:
    """Bulk load ``total`` ids into a worker's data directory, spread over the partitions' stores (other ids
    than the sample events'); returns the seconds it took."""
    return sum(
        bulk_load_store(
            store_path(data_dir, topic, partition),
            topic=topic,
            partition=partition,
            count=total // partitions,
            layout=PREFILL_LAYOUT,
            seed=partition,
        )
        for partition in range(partitions)
    )


def add_prefill_options(parser: argparse.ArgumentParser) -> None:
    """``--prefilled-ids`` and ``--prefilled-dir``, for the worker's benchmarks."""
    parser.add_argument(
        "--prefilled-ids", type=int, default=0, help="also run on stores holding this many ids in all (0: not)"
    )
    parser.add_argument(
        "--prefilled-dir",
        type=Path,
        help="where to keep the bulk-loaded stores between invocations (reused when they match; default: scratch)",
    )


def kept_or_made(marker: Path, wanted: dict, make: Callable[[], float]) -> tuple[float | None, bool]:
    """``(seconds, kept)``: unless ``marker`` says that what ``wanted`` describes was made already (kept between
    invocations: a bulk load of 100M ids takes minutes), run ``make``, which returns the seconds it took, and
    write the marker; a kept one gives the seconds its making took (None in markers that lack them)."""
    if marker.exists():
        held = json.loads(marker.read_text())
        if {key: held.get(key) for key in wanted} == wanted:
            return held.get("seconds"), True
    marker.unlink(missing_ok=True)
    seconds = make()
    marker.write_text(json.dumps({**wanted, "seconds": seconds}))
    return seconds, False


def reuse_or_prefill(
    data_dir: Path, topic: str, partitions: int, total: int, *, sealed_arrays: bool = True
) -> float | None:
    """``prefill_data_dir`` unless ``data_dir`` holds what it would make already; returns the seconds it took,
    None when reused. ``sealed_arrays=False`` loads stores whose generations all stay RocksDB runs
    (``benchmarks/without_sealed_arrays.py``)."""

    def make() -> float:
        shutil.rmtree(data_dir, ignore_errors=True)
        with nullcontext() if sealed_arrays else no_sealed_arrays():
            return prefill_data_dir(data_dir, topic, partitions, total)

    wanted = {"topic": topic, "partitions": partitions, "ids": total, "sealed_arrays": sealed_arrays}
    seconds, kept = kept_or_made(data_dir / "prefilled.json", wanted, make)
    return None if kept else seconds


def linked_copy(source: Path, target: Path) -> None:
    """A copy of a data directory whose SST files, sealed arrays and saved id filters are hard links: none is
    changed once written (a filter is saved to a new file that takes the name). A copy of gigabytes would still
    be written back to disk during the run it is for."""

    def link_or_copy(src: str, dst: str) -> None:
        if src.endswith((".sst", SUFFIX)) or os.path.basename(src) == FILTER_FILE:
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link_or_copy)
