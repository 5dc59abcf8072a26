"""The child process of ``store.filter_growth``: build a store's id filter with a given stretch and save it.

    python -m store.filter_builder STORE_DIR OUT_FILE SPAN

Reads the store through a secondary instance (no lock: its worker goes on writing), so the filter holds
every id live at the moment the instance caught up, below the number its stamp names: the first number of a
generation the writer started after the instance listed the families, if it did, which the instance cannot
read (the worker adds those ids, as it adds the ones recorded since).
"""

from __future__ import annotations

import sys
from pathlib import Path

from store import id_filter as filters
from store.child_process import end_with_parent
from store.dedup_store import DedupStore


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m store.filter_builder STORE_DIR OUT_FILE SPAN", file=sys.stderr)
        return 64
    end_with_parent()
    store_dir, out, span = Path(argv[0]), Path(argv[1]), int(argv[2])
    with DedupStore.open_secondary(store_dir) as store:
        id_filter, stamp = store.build_id_filter(span)
    filters.save(id_filter, out, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
