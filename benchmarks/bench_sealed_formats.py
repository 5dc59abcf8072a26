"""What a duplicate's lookup in a store's sealed generations costs in RocksDB's sealed runs, against the same
ids kept as fixed-width sorted arrays, as the store's sealed arrays keep them.

    python benchmarks/bench_sealed_formats.py [--size 100000000] [--generations 15] [--rounds 6]

At 1M ids and at ``--size`` ids, each split into ``--generations`` runs as a store's generations are, the same
random packed ``ajs-`` ids (sequence numbers as 4-byte values) are kept, and searched, three ways:

- **runs**: one SST file per generation written as the store seals one (zstd at level 12, 1 KiB blocks, the
  index in memory; ``bench_sealed_run.py``'s options), ingested as a column family each and read as the store
  reads a generation older than its newest: one multi-get per generation of that generation's ids;
- **fenced**: per generation one file of ``store/sealed_arrays.py``'s layout, memory-mapped: the ids' 16 bytes as
  sorted pairs of big-endian 64-bit halves, and the 4-byte sequence numbers in the same order. In memory,
  every 128th id's first half (0.06 bytes per id). A batch's ids of one generation are searched with numpy at
  once: the in-memory fence finds each id's stretch of 128, the stretch's first halves (1 KiB, contiguous) its
  position, and both halves there say whether it is held. This format holds the 16-byte ids only (``ajs-`` and
  UUIDs); other ids would need another.
- **guided**: the same files searched as ``store/sealed_arrays.py`` searches them: in memory, where each of
  about count / 32 slices of the key space starts (0.125 bytes per id). An id's slice bounds a binary search
  taken by all of a batch's ids of one generation in step, one numpy gather a step, so that their reads of
  memory overlap; ids sharing a first half are told apart by their second.

Then 100,000 of the ids, at random over every generation, are looked up in batches of 5,000; the six sides
(three formats, two sizes) take turns batch by batch in rotating order, so a slow moment of the shared machine
hits each alike (median of ``--rounds`` rounds after a first). Prints present ids/s, bytes on disk per id,
and each format's ratio of ``--size`` to 1M. No id filter and no Python per id beyond the lookups: the part
of a duplicate's cost that grows with the store.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rocksdict import Cache, Rdict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.bench_sealed_run import (  # noqa: E402
    BATCH,
    PROBES,
    Variant,
    batches_by_generation,
    random_ids,
    run_options,
    write_run,
)
from store import sealed_arrays  # noqa: E402
from store.codec import AJS_PREFIX  # noqa: E402
from store.options import BLOCK_CACHE_BYTES, GENERATION_BLOCK_BYTES, older_generation_reads  # noqa: E402
from store.sealed_arrays import SealedArrays, halves_of  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 160)
REFERENCE_IDS = 1_000_000
STRETCH = 128  # ids per fence entry
FORMATS = ("runs", "fenced", "guided")


@dataclass(frozen=True)
class SortedArrays:
    """One generation's ids as sorted fixed-width columns, and the fence kept in memory."""

    high: np.ndarray
    low: np.ndarray
    seqs: np.ndarray
    fence: np.ndarray

    @classmethod
    def of(cls, high: np.ndarray, low: np.ndarray, seqs: np.ndarray) -> SortedArrays:
        return cls(high=high, low=low, seqs=seqs, fence=np.array(high[::STRETCH]))

    def seqs_of(self, bodies: bytes) -> np.ndarray:
        """The sequence number of each 16-byte id of ``bodies`` (end to end), -1 where these arrays do not hold it."""
        high, low = halves_of(bodies)
        start = np.maximum(np.searchsorted(self.fence, high, side="right") - 1, 0) * STRETCH
        last = len(self.high) - 1
        stretch = np.minimum(start[:, None] + np.arange(STRETCH), last)
        at = np.minimum(start + (self.high[stretch] < high[:, None]).sum(axis=1), last)
        held = (self.high[at] == high) & (self.low[at] == low)  # random ids share no first half here
        return np.where(held, self.seqs[at].astype(np.int64), -1)  # signed: -1 must not wrap in uint32


@dataclass
class Side:
    """One size's generations as runs and as arrays, and the probes' batches in each format's keys: per batch,
    each generation's ids."""

    db: Rdict
    runs: list[Rdict]
    arrays: dict[str, list[SortedArrays | SealedArrays]]  # by format: the same files searched two ways
    batches: dict[str, list[dict[int, list[bytes]]]]
    disk_per_id: dict[str, float]

    def close(self) -> None:
        for family in self.runs:
            family.close()
        self.db.close()


def build(directory: Path, size: int, generations: int) -> Side:
    directory.mkdir()
    options = run_options(Variant("zstd12", GENERATION_BLOCK_BYTES, 16), Cache(BLOCK_CACHE_BYTES), False)
    db = Rdict(str(directory / "db"), options=options)
    picker = np.random.default_rng(1)
    owners = picker.integers(0, generations, PROBES)
    probes: list[bytes] = [b""] * PROBES
    runs, run_bytes, ids = [], 0, 0
    arrays: dict[str, list[SortedArrays | SealedArrays]] = {"fenced": [], "guided": []}
    for number in range(generations):
        keys, seqs = random_ids(size // generations, seed=size * 1000 + number)
        path = directory / f"run-{number}.sst"
        write_run(path, options, keys, seqs)
        run_bytes += path.stat().st_size
        family = db.create_column_family(f"generation-{number}", options)
        family.ingest_external_file([str(path)])
        family.set_read_options(older_generation_reads())
        runs.append(family)
        sealed_arrays.write(directory / f"arrays-{number}", AJS_PREFIX, keys.tobytes(), seqs, 0)
        guided = SealedArrays.open(directory / f"arrays-{number}")
        arrays["fenced"].append(SortedArrays.of(guided.high, guided.low, guided.seqs))
        arrays["guided"].append(guided)
        ids += len(keys)
        mine = np.flatnonzero(owners == number)
        for slot, at in zip(mine.tolist(), picker.choice(len(keys), mine.size, replace=False).tolist(), strict=True):
            probes[slot] = bytes(keys[at])
    in_arrays = batches_by_generation(owners, probes)
    batches = {
        "runs": batches_by_generation(owners, [AJS_PREFIX + probe for probe in probes]),  # as the runs hold them
        "fenced": in_arrays,
        "guided": in_arrays,
    }
    array_bytes = sum(os.path.getsize(name) for name in directory.glob("arrays-*"))
    disk = {"runs": run_bytes / ids, "fenced": array_bytes / ids, "guided": array_bytes / ids}
    return Side(db, runs, arrays, batches, disk)


def ask_runs(side: Side, asked: dict[int, list[bytes]]) -> int:
    return sum(side.runs[number][keys].count(None) for number, keys in asked.items())


def asker(form: str) -> Callable[[Side, dict[int, list[bytes]]], int]:
    def ask_arrays(side: Side, asked: dict[int, list[bytes]]) -> int:
        searched = side.arrays[form]
        return sum(int((searched[number].seqs_of(b"".join(keys)) < 0).sum()) for number, keys in asked.items())

    return ask_arrays


ASK: dict[str, Callable[[Side, dict[int, list[bytes]]], int]] = {
    "runs": ask_runs,
    "fenced": asker("fenced"),
    "guided": asker("guided"),
}


def turn_rates(sides: dict[int, Side], rounds: int) -> dict[tuple[str, int], float]:
    names = [(form, size) for form in FORMATS for size in sides]
    rates: dict[tuple[str, int], list[float]] = {name: [] for name in names}
    for round_number in range(rounds + 1):
        spent = dict.fromkeys(names, 0.0)
        for number in range(PROBES // BATCH):
            turn = (round_number + number) % len(names)
            for form, size in names[turn:] + names[:turn]:
                started = time.perf_counter()
                missing = ASK[form](sides[size], sides[size].batches[form][number])
                spent[(form, size)] += time.perf_counter() - started
                assert missing == 0, f"{form} at {size:,} ids: {missing} held ids not found"
        if round_number:  # the first round warms both formats' pages
            for name in names:
                rates[name].append(PROBES / spent[name])
    return {name: statistics.median(values) for name, values in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000_000, help="ids in all the generations together")
    parser.add_argument("--generations", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--scratch", type=Path, help="directory for the stores (default: a temporary one)")
    args = parser.parse_args()
    if args.size <= REFERENCE_IDS or args.generations < 1 or args.rounds < 1:
        raise SystemExit(f"--size must be above {REFERENCE_IDS:,}, --generations and --rounds at least 1")
    scratch = Path(tempfile.mkdtemp(prefix="dedupectl-bench-formats-", dir=args.scratch))
    sides: dict[int, Side] = {}
    try:
        for size in (REFERENCE_IDS, args.size):
            with console.status(f"writing {size:,} ids in both formats"):
                sides[size] = build(scratch / str(size), size, args.generations)
        with console.status("looking up present ids"):
            rates = turn_rates(sides, args.rounds)
    finally:
        for side in sides.values():
            side.close()
        shutil.rmtree(scratch, ignore_errors=True)
    table = Table(
        title=f"{args.generations} sealed generations, {PROBES:,} held ids in batches of {BATCH:,} "
        f"({os.cpu_count()} cores, median of {args.rounds} rounds)"
    )
    for column in ("format", "ids", "disk B/id", "present ids/s", "µs per id", f"vs {REFERENCE_IDS:,} ids"):
        table.add_column(column, justify="right")
    for form in FORMATS:
        for size, side in sides.items():
            rate = rates[(form, size)]
            table.add_row(
                form,
                f"{size:,}",
                f"{side.disk_per_id[form]:.1f}",
                f"{rate / 1e3:.1f}k",
                f"{1e6 / rate:.2f}",
                f"{rate / rates[(form, REFERENCE_IDS)]:.2f}",
            )
    console.print(table)


if __name__ == "__main__":
    main()
