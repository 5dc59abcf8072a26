"""The child process of ``store.generation_merge``: write one SST file per run of generations to merge.

    python -m store.merge_writer STORE_DIR MERGE_DIR

Reads the plan (``plan.json``: the runs, as family names, and the cut below which ids are aged) and the store
through a secondary instance (no lock: its worker goes on writing), then writes, per run, the live ids of its
generations in key order, and last ``done.json``, which lists the files written: a run whose generations
hold no live id gets no file. A generation of the plan that the instance does not find (aged meanwhile)
voids its run.
"""

from __future__ import annotations

import heapq
import json
import os
import sys
from pathlib import Path

from rocksdict import Cache, SstFileWriter

from store.child_process import end_with_parent
from store.dedup_store import DedupStore
from store.generation_merge import DONE_FILE, PLAN_FILE
from store.options import generation_options

# below the worker and a filter growth's child: a merge only makes later lookups cheaper, and can wait
MERGE_NICENESS = 10


def write_run(store: DedupStore, sources: list[str], out: Path, cut: int) -> int:
    """The live ids of ``sources`` into ``out`` in key order; how many (none: no file is left)."""
    writer = SstFileWriter(options=generation_options(Cache(0), filtered=False))
    writer.open(str(out))
    written = 0
    last = None
    for key, value in heapq.merge(*(store.generation_items(name) for name in sources)):
        if key == last or int.from_bytes(value, "big") < cut:
            continue  # aged; or a key seen already, which an SST file cannot take twice
        writer[key] = value
        last = key
        written += 1
    if written:
        writer.finish()
    else:
        del writer
        out.unlink(missing_ok=True)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m store.merge_writer STORE_DIR MERGE_DIR", file=sys.stderr)
        return 64
    end_with_parent()
    store_dir, directory = Path(argv[0]), Path(argv[1])
    os.nice(MERGE_NICENESS)
    plan = json.loads((directory / PLAN_FILE).read_text())
    done = []
    with DedupStore.open_secondary(store_dir) as store:
        held = {name for name, _, _ in store.id_families()}
        for index, sources in enumerate(plan["runs"]):
            if not set(sources) <= held:
                continue
            name = f"run-{index:04d}.sst"
            ids = write_run(store, sources, directory / name, plan["cut"])
            if ids:
                done.append({"sources": sources, "file": name, "ids": ids})
    partial = directory / f"{DONE_FILE}.partial"
    partial.write_text(json.dumps({"runs": done}))
    os.replace(partial, directory / DONE_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
