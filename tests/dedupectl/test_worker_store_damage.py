"""The worker on a damaged store, against a real broker: a damaged file the store answers from stops the worker
in one line (exit 2) before it publishes anything (a table or the MANIFEST at open, a sealed-arrays file when
first read), and a damaged id filter is built anew; either way no id within the window is published twice."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import pytest
from test_worker_dedup import read_all

from dedupectl.worker import Worker
from store import dedup_store, generations
from store.dedup_store import DedupStore
from store.errors import StoreCorruptError
from store.filter_keeper import FILTER_FILE
from store.id_filter import GROUPS
from store.layout import store_path
from store.sealed_arrays import BLOCK_BYTES, HEADER_BYTES

COUNT = 9_000
GENERATION = 2_000


@pytest.fixture
def small_generations(monkeypatch) -> int:
    """``max_keys`` for stores of this process whose generations (and sealed arrays) hold about GENERATION ids."""
    monkeypatch.setattr(dedup_store, "MIN_FILTER_WINDOW", 1)
    monkeypatch.setattr(generations, "MIN_GENERATION_IDS", 1)
    return math.floor(GENERATION * (GROUPS - 1) / dedup_store.FILTER_SLACK)


def _ids(start: int, stop: int) -> list[str]:
    return [f"ajs-{n:032x}" for n in range(start, stop)]


def _produce(pipeline, ids: list[str], tag: str) -> None:
    pipeline.produce((i.encode(), json.dumps({"messageId": i, "tag": tag}).encode()) for i in ids)


def _run(pipeline, max_keys: int):
    config = pipeline.config(max_keys=max_keys, batch_max_messages=500)
    return Worker(config).run(threading.Event(), exit_on_idle_s=2.0)


def _flip(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))


def _scribble(file: Path) -> None:
    """A byte flipped in every block of a sealed-arrays file's ids, outside its block table: whatever a lookup
    reads there is damaged (each block is checked at its first read)."""
    data = bytearray(file.read_bytes())
    table = -(-len(data) // BLOCK_BYTES) * 4
    for at in range(HEADER_BYTES + 100, len(data) - table, BLOCK_BYTES):
        data[at] ^= 0xFF
    file.write_bytes(bytes(data))


def _published_once(pipeline) -> dict[bytes, int]:
    counts: dict[bytes, int] = {}
    for message in read_all(pipeline, pipeline.output_topic):
        counts[message.key()] = counts.get(message.key(), 0) + 1
    assert {key for key, count in counts.items() if count > 1} == set()
    return counts


def _filled(make_pipeline, max_keys: int):
    pipeline = make_pipeline(partitions=1)
    _produce(pipeline, _ids(0, COUNT), "first")
    assert _run(pipeline, max_keys).published == COUNT
    store = store_path(pipeline.config().data_dir, pipeline.input_topic, 0)
    # a stop ends the sealed arrays being written: the store's next writer writes them, as here
    with DedupStore.open(store, topic=pipeline.input_topic, partition=0, window_ids=max_keys) as writer:
        assert writer.wait_for_seals(60)
    assert len(list(store.glob("*.arrays"))) >= 3 and (store / FILTER_FILE).exists()
    return pipeline, store


@pytest.mark.parametrize("damaged", ["sealed-arrays", "table", "MANIFEST"])
def test_a_worker_refuses_a_damaged_store_before_publishing(make_pipeline, small_generations, damaged):
    pipeline, store = _filled(make_pipeline, small_generations)
    if damaged == "sealed-arrays":
        file = sorted(store.glob("*.arrays"))[0]
        _scribble(file)
    elif damaged == "table":
        file = max(store.glob("*.sst"), key=lambda f: f.stat().st_size)
        os.truncate(file, file.stat().st_size // 2)
    else:
        file = store / (store / "CURRENT").read_text().strip()
        os.truncate(file, file.stat().st_size // 2)
    # in-window retries, the oldest generation's among them (a sealed-arrays block is checked when first read),
    # then new ids
    _produce(pipeline, _ids(0, 500) + _ids(COUNT - 3_000, COUNT + 500), "again")
    with pytest.raises(StoreCorruptError) as refused:
        _run(pipeline, small_generations)
    # a MANIFEST cut short reads as an older one, whose tables are gone: RocksDB names a missing table then
    assert (file.name in str(refused.value) or damaged == "MANIFEST") and "is damaged" in str(refused.value)
    assert "restore" in str(refused.value)
    assert len(_published_once(pipeline)) == COUNT  # nothing published by the refused run


def test_a_damaged_id_filter_is_built_anew_and_no_retry_is_published_again(make_pipeline, small_generations, caplog):
    pipeline, store = _filled(make_pipeline, small_generations)
    _flip(store / FILTER_FILE)
    _produce(pipeline, _ids(COUNT - 6_000, COUNT + 500), "again")  # retries across every live generation
    summary = _run(pipeline, small_generations)
    assert (summary.published, summary.duplicates) == (500, 6_000)
    assert "built anew" in caplog.text
    assert len(_published_once(pipeline)) == COUNT + 500


def test_the_worker_command_exits_2_in_one_line_on_a_damaged_store(make_pipeline, small_generations):
    pipeline, store = _filled(make_pipeline, small_generations)
    file = sorted(store.glob("*.arrays"))[-1]
    _scribble(file)
    first = int(file.name.split(".")[1])  # ids.<its generation's first number>.<prefix>.arrays
    _produce(pipeline, _ids(first, first + 10), "again")  # retries of ids that file holds
    process = pipeline.spawn_worker("w1", pipeline.config().data_dir, "--exit-on-idle", "2")
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2, stderr
    last = stderr.strip().splitlines()[-1]
    assert "is damaged" in last and file.name in last and "restore" in last
    assert len(_published_once(pipeline)) == COUNT
