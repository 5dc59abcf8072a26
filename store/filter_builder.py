"""The child process of ``store.filter_growth``: build a store's id filter with a given stretch and save it.

    python -m store.filter_builder STORE_DIR OUT_FILE SPAN

Reads the store through a secondary instance (no lock: its worker goes on writing), so the filter holds
every id live at the moment the instance caught up, below the number its stamp names. Should the writer start
a generation the instance did not open meanwhile, under a number below that one, the build is made again.
"""

from __future__ import annotations

import sys
from pathlib import Path

from store import id_filter as filters
from store.dedup_store import DedupStore
from store.errors import StoreError

ATTEMPTS = 3


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m store.filter_builder STORE_DIR OUT_FILE SPAN", file=sys.stderr)
        return 64
    store_dir, out, span = Path(argv[0]), Path(argv[1]), int(argv[2])
    for attempt in range(ATTEMPTS):
        try:
            with DedupStore.open_secondary(store_dir) as store:
                id_filter, stamp = store.build_id_filter(span)
        except StoreError:
            if attempt + 1 == ATTEMPTS:
                raise
            continue  # the writer started a generation meanwhile: read the store again
        filters.save(id_filter, out, stamp)
        return 0
    raise AssertionError("unreachable")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
