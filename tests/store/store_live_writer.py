"""A separate process that holds a store read-write and keeps writing, as a worker would.

    python tests/store/store_live_writer.py STORE_DIR STATUS_FILE STOP_FILE

Every ~10 ms it dedups and records a batch of 500 new ``ajs-`` ids (id n is ``ajs-`` + n as 32 hex digits),
flushes every 10th batch (SST files, LOG events) and ages to ``MAX_KEYS`` every 25th (dropping generations of
``GENERATION_IDS``). Its
statistics are dumped to the LOG every second. After each batch it rewrites STATUS_FILE with the number of
batches, the files aging dropped and the latency of each batch; it exits 0 once STOP_FILE exists.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import store.dedup_store
import store.generations
import store.options
from store.aging import AgingPolicy, age_step
from store.dedup_store import DedupStore

BATCH = 500
MAX_KEYS = 20_000
GENERATION_IDS = 5_000
BASE_MS = 1_700_000_000_000


def message_id(n: int) -> bytes:
    return f"ajs-{n:032x}".encode()


def main(store_dir: str, status_file: str, stop_file: str) -> None:
    store.options.STATS_DUMP_SECONDS = 1  # so the LOG holds fresh statistics within the test
    store.dedup_store.MIN_FILTER_WINDOW = 1  # generations of GENERATION_IDS, not of the production floor
    store.generations.MIN_GENERATION_IDS = 1
    status_path, stop_path = Path(status_file), Path(stop_file)
    latencies: list[float] = []
    dropped = 0
    policy = AgingPolicy(max_keys=MAX_KEYS)
    window = GENERATION_IDS * 15 * 100 // 105  # the id filter's stretch: window * 1.05 / 15
    with DedupStore.open(Path(store_dir), topic="live", partition=0, window_ids=window) as dedup:
        batches = 0
        while not stop_path.exists():
            first = batches * BATCH
            ids = [message_id(n) for n in range(first, first + BATCH)]
            started = time.perf_counter()
            assert not any(dedup.contains_many(ids))
            dedup.record(ids, [BASE_MS + n for n in range(first, first + BATCH)], input_offset=first + BATCH)
            batches += 1
            if batches % 10 == 0:
                dedup.flush()
            if batches % 25 == 0:
                dropped += age_step(dedup, policy).generations_dropped
            latencies.append(time.perf_counter() - started)
            temporary = status_path.with_suffix(".tmp")
            temporary.write_text(json.dumps({"batches": batches, "dropped": dropped, "latencies": latencies}))
            temporary.replace(status_path)
            time.sleep(0.01)


if __name__ == "__main__":
    main(*sys.argv[1:4])
