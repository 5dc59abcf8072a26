"""The child process of a worker's store that writes one sealed generation's arrays.

    python -m store.arrays_writer STORE_DIR FAMILY FIRST_SEQ

Reads the generation's family through a secondary instance (no lock: its worker goes on writing) and writes
its fixed-width ids to their files beside the store (``store.generation_arrays.write_generation``: each
synced and renamed into place), then lists their names in ``written.json`` in its TMPDIR, for the store that
started it: that store names them in its metadata, or removes them. Reading every id of a generation is work
for the interpreter, which in the worker's process would hold the GIL its batches need.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from store import generation_arrays
from store.child_process import end_with_parent
from store.dedup_store import DedupStore

# below the worker: sealed arrays only make later lookups cheaper, and can wait for its batches
WRITER_NICENESS = 10


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m store.arrays_writer STORE_DIR FAMILY FIRST_SEQ", file=sys.stderr)
        return 64
    end_with_parent()
    store_dir, family, first_seq = Path(argv[0]), argv[1], int(argv[2])
    os.nice(WRITER_NICENESS)
    with DedupStore.open_secondary(store_dir) as store:
        if family not in {name for name, _, _ in store.id_families()}:
            print(f"generation {family} is not in store {store_dir}", file=sys.stderr)
            return 1
        names = generation_arrays.write_generation(store_dir, family, store.family(family), first_seq)
    written = Path(tempfile.gettempdir()) / generation_arrays.WRITTEN_FILE
    partial = written.with_name(f"{written.name}.partial")
    partial.write_text(json.dumps({"names": names}))
    os.replace(partial, written)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
