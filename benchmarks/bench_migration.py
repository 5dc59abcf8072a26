"""How long a store of schema 4 (every id in one FIFO family) takes to move into generations, the first time a
writer opens it.

    python benchmarks/bench_migration.py [--ids 10000000]

Records ``--ids`` random ``ajs-`` ids in batches of 5,000 (the worker's write path), gives the store schema 4's
layout (``store.testing.as_schema_4``), then times ``DedupStore.open`` on it (the migration: every live id
read in key order, written into one SST file per generation, ingested) and checks that every id is still
found. Prints the seconds and ids per second. Needs about 1 GB of disk per 10M ids.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from store.dedup_store import DedupStore  # noqa: E402
from store.testing import as_schema_4  # noqa: E402

BATCH = 5_000
CHECKED = 100_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ids", type=int, default=10_000_000)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-bench-migration-"))
    path = scratch / "events-0"
    rng = random.Random(5)
    checked: list[bytes] = []
    try:
        started = time.perf_counter()
        with DedupStore.open(path, topic="events", partition=0) as store:
            for first in range(0, args.ids, BATCH):
                ids = [f"ajs-{rng.getrandbits(128):032x}".encode() for _ in range(min(BATCH, args.ids - first))]
                store.record(ids, [1_700_000_000_000] * len(ids))
                if len(checked) < CHECKED:
                    checked += ids[:50]
        print(f"recorded {args.ids:,} ids in {time.perf_counter() - started:.0f} s", flush=True)
        started = time.perf_counter()
        moved = as_schema_4(path)
        print(f"gave the store schema 4's layout ({moved:,} ids) in {time.perf_counter() - started:.0f} s", flush=True)
        started = time.perf_counter()
        store = DedupStore.open(path, topic="events", partition=0)
        seconds = time.perf_counter() - started
        try:
            generations = len(store.id_families())
            found = store.contains_many(checked)
        finally:
            store.close()
        if not all(found):
            raise SystemExit(f"{found.count(False)} of {len(checked)} ids were lost by the migration")
        print(
            f"migrated {moved:,} ids into {generations} generations in {seconds:.1f} s "
            f"({moved / seconds / 1e6:.2f}M ids/s); {len(checked):,} ids checked afterwards, all found"
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
