"""The store without its sealed arrays, for benchmarks that measure what the arrays buy end to end.

Every generation then stays a RocksDB family, sealed into one run with the store's own options (1 KiB blocks,
zstd, no bloom filter on the run: the id filter routes each lookup to one generation), as before the arrays
existed; a bulk load compacts each generation of several files into its run instead of writing arrays.

    python benchmarks/without_sealed_arrays.py run ...     # ``dedupectl run ...`` on such stores

``no_sealed_arrays()`` makes the same change in a benchmark's own process (its bulk loads). Nothing in the
product reads this module.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from store import generation_keeper


@contextmanager
def no_sealed_arrays() -> Iterator[None]:
    """Within it, a store opened by this process writes no sealed arrays (``GenerationKeeper``'s ``converts``)."""
    keeper = generation_keeper.GenerationKeeper
    original = keeper.__init__

    @functools.wraps(original)
    def without_arrays(self, *args, **kwargs) -> None:
        original(self, *args, **{**kwargs, "converts": False})

    keeper.__init__ = without_arrays
    try:
        yield
    finally:
        keeper.__init__ = original


if __name__ == "__main__":
    from dedupectl.cli.app import main

    with no_sealed_arrays():
        main()
