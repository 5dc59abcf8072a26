"""What a worker killed with a large store pays before its first batch: its id filter, read back.

    python benchmarks/bench_restart.py [--sizes 1000000,10000000,100000000] [--batch 5000]
                                       [--bulk-load-dir DIR] [--out benchmarks/results/restart.json] [--markdown FILE]

For each size N, a store of N random ``ajs-`` ids is bulk loaded (``benchmarks/bulk_stores.py``, as
``dedupectl rebuild`` makes one; its id filter sized for a window of N x 1.05, as a worker's is for its aging
bound). A worker process then opens it (with a worker's memtable budget and block cache, at their defaults),
records a generation and a half more ids through the worker's write path (``contains_many``, ``record``, then
an aging step at the bound, batches of ``--batch``), so that a generation is sealed and aged out and the
filter saved with it, and is killed (SIGKILL) right after its last batch. Then, in this process, the store is
opened as a worker opens it and its first lookup timed, twice:

- from the saved filter: the file read back, and the ids recorded since it was saved read from the store;
- by a full build: the same store with the saved filter removed, every id read (what each restart after a
  kill cost when the filter was saved only at close).

Prints the seconds of each, their ratio, the ids read back and the store's bytes on disk per id (the saved
filter included, as a running store keeps it), and writes the figures to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.bulk_stores import bulk_load_store, kept_or_made, linked_copy  # noqa: E402
from dedupectl.config import DEFAULT_MEMTABLE_BUDGET  # noqa: E402
from store import id_filter as filters  # noqa: E402
from store.bulk_load import LoadLayout  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402
from store.filter_keeper import FILTER_FILE  # noqa: E402
from store.footprint import dir_bytes  # noqa: E402
from store.options import shared_memory  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 160)
LAYOUT = LoadLayout(batch_ids=10_000, bucket_ids=10_000_000)
TOPIC = "restart"

# the worker: records a generation and a half more ids, then is killed with its store open
_KILLED_WORKER = """
import os, signal, sys, time
from pathlib import Path
import numpy as np
from benchmarks.bulk_stores import random_ajs_ids
from dedupectl.config import DEFAULT_MEMTABLE_BUDGET
from store.aging import AgingPolicy, age_step
from store.dedup_store import DedupStore  # noqa: E402
from store.options import shared_memory
path, window, batch = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
shared = shared_memory(DEFAULT_MEMTABLE_BUDGET)  # a worker's memtable budget and block cache, at their defaults
store = DedupStore.open(path, topic=sys.argv[4], partition=0, shared=shared, window_ids=window)
bound = AgingPolicy(max_keys=window)
extra = store.generation_ids() * 3 // 2
ids = random_ajs_ids(np.random.default_rng(11), extra).tolist()
started = time.monotonic()
for at in range(0, extra, batch):
    chunk = ids[at : at + batch]
    new = [i for i, known in zip(chunk, store.contains_many(chunk)) if not known]
    store.record(new, [0] * len(new))
    age_step(store, bound)  # after each batch, as a worker ages its store at its bound
print(extra, time.monotonic() - started, store.state.live_ids, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def first_lookup_seconds(path: Path, window: int) -> float:
    """Open the store as a worker does and answer one lookup (the id filter is made ready first)."""
    started = time.perf_counter()
    shared = shared_memory(DEFAULT_MEMTABLE_BUDGET)  # as a worker opens its stores, at the default budget
    with DedupStore.open(path, topic=TOPIC, partition=0, shared=shared, window_ids=window) as store:
        store.contains_many([b"ajs-00000000000000000000000000000000"])
        seconds = time.perf_counter() - started
    return seconds


def measure(scratch: Path, size: int, batch: int, kept: Path | None) -> dict:
    path = scratch / f"restart-{size}"
    window = size + size // 20
    loaded = (kept or scratch) / f"loaded-{size}"

    def load() -> float:
        console.print(f"[dim]bulk loading {size:,} ids[/dim]")
        shutil.rmtree(loaded, ignore_errors=True)
        return bulk_load_store(loaded, topic=TOPIC, partition=0, count=size, layout=LAYOUT, seed=7, window_ids=window)

    wanted = {"ids": size, "window": window, "seed": 7}
    load_seconds, _ = kept_or_made(loaded.with_name(f"{loaded.name}.json"), wanted, load)
    shutil.rmtree(path, ignore_errors=True)
    linked_copy(loaded, path)  # the kept load stays as it was: the killed worker writes a copy
    worker = subprocess.run(
        [sys.executable, "-c", _KILLED_WORKER, str(path), str(window), str(batch), TOPIC],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    if worker.returncode != -9:
        raise SystemExit(f"the worker process ended with {worker.returncode}, not by the kill:\n{worker.stderr}")
    extra, record_seconds, live = worker.stdout.split()
    saved = filters.load(path / FILTER_FILE)
    read_back = size + int(extra) - saved[1].next_seq if saved is not None else None
    from_saved = first_lookup_seconds(path, window)
    held = int(live)  # after aging at the bound
    disk_per_id = dir_bytes(path) / held  # the saved filter included
    filter_per_id = (path / FILTER_FILE).stat().st_size / held
    (path / FILTER_FILE).unlink()
    full_build = first_lookup_seconds(path, window)
    shutil.rmtree(path, ignore_errors=True)
    return {
        "ids": size,
        "ids_recorded_by_the_killed_worker": int(extra),
        "ids_held_at_the_kill": held,
        "load_seconds": load_seconds,
        "record_seconds": float(record_seconds),
        "ids_read_back": read_back,
        "first_lookup_from_saved_s": from_saved,
        "first_lookup_full_build_s": full_build,
        "ratio": full_build / from_saved,
        "disk_bytes_per_id": disk_per_id,
        "filter_file_bytes_per_id": filter_per_id,
    }


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def table(rows: list[dict]) -> Table:
    out = Table(title="a killed worker's store: open to first answer")
    columns = (
        "ids loaded", "recorded by the killed worker", "held at the kill", "of them read back", "from the saved filter",
        "full build",
    )  # fmt: skip
    for column in (*columns, "ratio", "disk B/id (of it the filter)"):
        out.add_column(column, justify="right")
    for row in rows:
        out.add_row(
            f"{row['ids']:,}",
            f"{row['ids_recorded_by_the_killed_worker']:,}",
            f"{row['ids_held_at_the_kill']:,}",
            _count(row["ids_read_back"]),
            f"{row['first_lookup_from_saved_s']:.2f} s",
            f"{row['first_lookup_full_build_s']:.2f} s",
            f"{row['ratio']:.1f}x",
            f"{row['disk_bytes_per_id']:.1f} ({row['filter_file_bytes_per_id']:.2f})",
        )
    return out


def markdown(result: dict) -> str:
    lines = [
        "# A killed worker's store: open to first answer",
        "",
        f"`benchmarks/bench_restart.py`, {result['machine']['cpus']} cores, {result['machine']['platform']}; "
        f"batches of {result['batch']:,} ids.",
        "",
        "| ids loaded | ids recorded by the killed worker | held at the kill | of them read back | from the saved "
        "filter | full build | ratio | bytes on disk per id (of them the saved filter) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['ids']:,} | {row['ids_recorded_by_the_killed_worker']:,} | {row['ids_held_at_the_kill']:,} | "
            f"{_count(row['ids_read_back'])} | "
            f"{row['first_lookup_from_saved_s']:.2f} s | {row['first_lookup_full_build_s']:.2f} s | "
            f"{row['ratio']:.1f}x | {row['disk_bytes_per_id']:.1f} ({row['filter_file_bytes_per_id']:.2f}) |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000,100000000")
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--scratch", type=Path, help="directory for the stores (default: a temporary one)")
    parser.add_argument(
        "--bulk-load-dir",
        type=Path,
        help="keep each size's bulk-loaded store here, and reuse it in a later run (the killed worker writes a copy)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/restart.json")
    parser.add_argument("--markdown", type=Path, help="also write the table as markdown to this file")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-bench-restart-", dir=args.scratch))
    rows = []
    try:
        for size in sizes:
            rows.append(measure(scratch, size, args.batch, args.bulk_load_dir))
            console.print(table(rows[-1:]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "batch": args.batch,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    console.print(table(rows))
    if args.markdown:
        args.markdown.write_text(markdown(result))


if __name__ == "__main__":
    main()
