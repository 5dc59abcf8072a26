"""Where a duplicate's lookup spends its time, in a store of ``--size`` ids against a store of 1M ids: which part
of its cost grows with the store, and what a sealed format of the store's own would make of it.

    python benchmarks/bench_duplicate_cost.py [--size 100000000] [--batch 5000] [--sealed-as-arrays]

Both stores are grown as ``bench_scale.py`` grows them (the worker's write path, bounded as a worker with
``max_keys`` is: the 1M store at 1M ids, the other at ``--size``), kept open in one process and sharing the
worker's block cache, and their files synced (else the kernel writes them back during the first rounds). Then
100,000 ids each store holds go through ``contains_many`` in batches of ``--batch``, the two stores taking turns
on each batch (median of 5 rounds, ``bench_scale.py``'s ``turn_rates``). Each round draws its ids anew: a worker
asks about a duplicate once, and ids asked again round after round find more of what they read in the CPU's
caches. They are drawn these ways:

- **all**: at random over every live id, as ``bench_scale.py`` draws its present ids;
- **sealed**: over the generations older than the newest (sealed runs, read without filling the block cache);
- **newest**: over the newest generation (written, its blocks kept in the block cache);
- **a full newest generation's share**: over the sealed generations, but for the share of the ids a full
  newest generation would hold (its stretch over the ids held, about 7%), drawn over the newest;
- **own work**: as **all**, with RocksDB's reads left out (every id the filter routes is answered as found
  without asking its generation): the store's own work per duplicate, the id filter and the Python around
  each batch.

With ``--sealed-as-arrays``, each store's sealed generations are also written as sorted arrays
(``store/sealed_arrays.py``, a layout the store's generations do not use yet), and the draws over all, over the
sealed generations and with a full newest generation's share are measured again with the sealed generations
searched there, the newest one still in RocksDB: a prototype of that format inside the store's lookups. Before
each draw is timed, a batch of it is asked with RocksDB's reads, then as measured: every id must be found, with
the same number.

Prints µs per duplicate in each store (the median of the rounds' rates), the median of the rounds' ratios of the
two rates (present lookups are held to 0.8 of the 1M store's rate at 100M ids) and each round's ratio, and what
share of the live ids each store's newest generation holds.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.bench_scale import (  # noqa: E402
    PRESENT_SAMPLE,
    REFERENCE_IDS,
    bounded_store,
    grow,
    quiet,
    turn_rates,
)
from benchmarks.bench_store import message_id  # noqa: E402
from dedupectl.config import DEFAULT_MEMTABLE_BUDGET  # noqa: E402
from store import sealed_arrays  # noqa: E402
from store.codec import AJS_PREFIX, encode_ids  # noqa: E402
from store.dedup_store import DedupStore  # noqa: E402
from store.memory import limit_heap_retention  # noqa: E402
from store.options import shared_memory  # noqa: E402
from store.sealed_arrays import SealedArrays  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 160)
FOUND = (1).to_bytes(8, "big")
PACKED_AJS = len(AJS_PREFIX) + 16  # an ``ajs-`` id's key: the prefix and its 16 bytes


@dataclass(frozen=True)
class Row:
    label: str
    draw: str  # all, sealed, newest or full (see drawn)
    reads: str  # rocksdb, none (the store's own work), arrays (sealed generations in store.sealed_arrays)


ROWS = (
    Row("all", "all", "rocksdb"),
    Row("sealed", "sealed", "rocksdb"),
    Row("newest", "newest", "rocksdb"),
    Row("a full newest generation's share", "full", "rocksdb"),
    Row("own work", "all", "none"),
)
ARRAY_ROWS = (
    Row("all, sealed as arrays", "all", "arrays"),
    Row("sealed, as arrays", "sealed", "arrays"),
    Row("a full newest generation's share, sealed as arrays", "full", "arrays"),
)


@contextmanager
def asked_otherwise(store: DedupStore, arrays: dict[str, SealedArrays] | None) -> Iterator[None]:
    """``store``'s lookups with its generations asked otherwise than in RocksDB: with ``arrays`` None, every key
    a generation is asked about is answered as found without reading (the store's own work); else the
    generations named in ``arrays`` (``store``'s own: another store's generations may bear the same names) are
    searched there, the others in RocksDB."""
    rocksdb = store._ask

    def ask(generation, keys, indexes, values, per_call):
        if arrays is None:
            for index in indexes:
                values[index] = FOUND
            return []
        searched = arrays.get(generation.name)
        if searched is None:
            return rocksdb(generation, keys, indexes, values, per_call)
        missing = []
        seqs = searched.seqs_of(b"".join([keys[index][len(AJS_PREFIX) :] for index in indexes])).tolist()
        for index, seq in zip(indexes, seqs, strict=True):
            if seq < 0:
                missing.append(index)
            else:
                values[index] = seq.to_bytes(8, "big")
        return missing

    with mock.patch.object(store, "_ask", ask):
        yield


def sealed_as_arrays(store: DedupStore, directory: Path) -> dict[str, SealedArrays]:
    """Each of ``store``'s generations older than the newest, its ids written as sorted arrays
    (``store/sealed_arrays.py``) under ``directory``; by family name."""
    directory.mkdir()
    arrays = {}
    for name, first, _ in store.id_families()[:-1]:
        items = list(store.generation_items(name))
        packed = np.frombuffer(b"".join(key for key, _ in items), dtype=np.uint8)
        if packed.size != PACKED_AJS * len(items):
            raise SystemExit(f"generation {name} holds ids other than ajs- ids: the arrays hold those only")
        bodies = np.ascontiguousarray(packed.reshape(-1, PACKED_AJS)[:, len(AJS_PREFIX) :]).tobytes()
        seqs = np.fromiter((int.from_bytes(value, "big") for _, value in items), dtype=np.int64, count=len(items))
        sealed_arrays.write(directory / name, AJS_PREFIX, bodies, seqs, first)
        opened = SealedArrays.open(directory / name)
        for column in (opened.high, opened.low, opened.seqs):  # map every page now, as a store opening its files would
            column.sum()
        arrays[name] = opened
    return arrays


def newest_first_seq(store: DedupStore) -> int:
    return store.id_families()[-1][1]


def full_newest_share(store: DedupStore) -> float:
    """The share of ``store``'s live ids a full newest generation holds: its stretch over the ids held."""
    return min(1.0, store.generation_ids() / store.state.live_ids)


def drawn(store: DedupStore, how: str, rng: random.Random) -> list[bytes]:
    """``PRESENT_SAMPLE`` ids ``store`` holds: over all its live ids, over the generations older than the
    newest (sealed), over the newest, or (full) over the sealed ones but for the share a full newest generation
    would have of the store's ids (its stretch over the ids held), drawn over the newest."""
    low, high = store.state.first_live_seq, store.state.next_seq
    newest = newest_first_seq(store)
    if how == "full":
        from_newest = round(PRESENT_SAMPLE * full_newest_share(store))
        ids = [message_id(rng.randrange(newest, high)) for _ in range(from_newest)]
        ids += [message_id(rng.randrange(low, newest)) for _ in range(PRESENT_SAMPLE - from_newest)]
        rng.shuffle(ids)
        return ids
    if how == "sealed":
        high = newest
    elif how == "newest":
        low = newest
    return [message_id(rng.randrange(low, high)) for _ in range(PRESENT_SAMPLE)]


def fresh_draws(store: DedupStore, how: str, rng: random.Random) -> Callable[[], list[bytes]]:
    """Ids ``drawn`` anew for each round: a worker asks about a duplicate once, and ids asked again find their
    memory in the CPU's caches more often (both formats read faster so, the arrays the more)."""
    return lambda: drawn(store, how, rng)


def newest_share(store: DedupStore) -> float:
    state = store.state
    return (state.next_seq - newest_first_seq(store)) / (state.next_seq - state.first_live_seq)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument(
        "--sealed-as-arrays", action="store_true", help="also read the sealed generations as sorted arrays"
    )
    parser.add_argument("--scratch", type=Path, help="directory for the stores (default: a temporary one)")
    args = parser.parse_args()
    if args.size <= REFERENCE_IDS:
        raise SystemExit(f"--size must be above {REFERENCE_IDS:,}")
    limit_heap_retention()
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-bench-duplicate-", dir=args.scratch))
    shared = shared_memory(DEFAULT_MEMTABLE_BUDGET)
    rows = ROWS + (ARRAY_ROWS if args.sealed_as_arrays else ())
    rates = {}
    try:
        with (
            bounded_store(scratch, "reference", shared, REFERENCE_IDS) as reference,
            bounded_store(scratch, "bench", shared, args.size) as store,
            Progress(console=console, transient=True) as progress,
        ):
            for name, grown, size in (("1M store", reference, REFERENCE_IDS), ("store", store, args.size)):
                task = progress.add_task(f"growing the {name}", total=size)
                grow(grown, size, args.batch, progress, task)
                quiet(grown)
            arrays: dict[str, dict[str, SealedArrays]] = {"store": {}, "reference": {}}
            if args.sealed_as_arrays:
                progress.add_task("writing the sealed generations as arrays", total=None)
                for name, grown in (("store", store), ("reference", reference)):
                    arrays[name] = sealed_as_arrays(grown, scratch / f"{name}-arrays")
            os.sync()  # else the kernel writes the files back while the first rounds are timed
            rng = random.Random(args.size)
            for seed, row in enumerate(rows):
                progress.add_task(f"looking up: {row.label}", total=None)
                asked = {"store": store, "reference": reference}
                # every id held, and with its own number whatever reads it: RocksDB's answers first
                checked = {name: drawn(grown, row.draw, rng)[: args.batch] for name, grown in asked.items()}
                expected = {name: asked[name].live_seqs(encode_ids(ids)) for name, ids in checked.items()}
                with ExitStack() as reads:
                    for name, grown in asked.items():
                        if row.reads != "rocksdb":
                            reads.enter_context(asked_otherwise(grown, arrays[name] if row.reads == "arrays" else None))
                    for name, ids in checked.items():
                        if row.reads != "none":
                            answers = asked[name].live_seqs(encode_ids(ids))
                            assert None not in answers and answers == expected[name], f"{row.label}: wrong answers"
                    rates[row.label] = turn_rates(
                        {
                            name: (grown.contains_many, fresh_draws(grown, row.draw, rng))
                            for name, grown in asked.items()
                        },
                        PRESENT_SAMPLE,
                        args.batch,
                        seed,
                    )
            shares = (newest_share(reference), newest_share(store))
            full = (full_newest_share(reference), full_newest_share(store))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = Table(title=f"a duplicate's lookup, {PRESENT_SAMPLE:,} ids in batches of {args.batch:,}")
    columns = ("ids drawn over", "1M store, µs", f"{args.size:,} ids, µs", "ratio of the rates", "rounds' ratios")
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        figures = rates[row.label]
        table.add_row(
            row.label,
            f"{1e6 / figures['reference_per_s']:.2f}",
            f"{1e6 / figures['per_s']:.2f}",
            f"{figures['ratio_vs_reference']:.3f}",
            " ".join(f"{ratio:.2f}" for ratio in figures["round_ratios"]),
        )
    console.print(table)
    console.print(
        f"share of the live ids in the newest generation: {shares[0]:.1%} (1M store), {shares[1]:.1%}; "
        f"a full one's: {full[0]:.1%}, {full[1]:.1%}"
    )


if __name__ == "__main__":
    main()
