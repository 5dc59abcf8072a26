"""Keeping the worker's resident memory to what its stores hold.

What a store needs per retained id is small: its bloom filters and indexes. What glibc keeps resident after
RocksDB frees memory is not, and grows with the work done (figures: docs/benchmarks.md):

- RocksDB allocates each memtable in large arena blocks. glibc serves such blocks with ``mmap`` at first, but
  after the first one is freed it raises its mmap threshold to that size, so later blocks come from the heap,
  where a freed block may stay resident: up to a memtable's worth per store. ``limit_heap_retention`` fixes
  the threshold, once, at start.
- Flushes and compactions run in background threads whose malloc arenas keep freed small blocks. Calling
  ``release_free_memory`` now and then (the worker: once a minute) gives them back; it takes a few
  milliseconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's default, made fixed


def _libc(function: str, argtypes: list):
    """A function of the C library, or None on one without it (not glibc)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        found = getattr(ctypes.CDLL(name), function)
    except (OSError, AttributeError):
        return None
    found.argtypes = argtypes
    return found


def limit_heap_retention() -> bool:
    """Make large allocations always ``mmap``-ed (glibc); call once at process start. Returns whether it took
    effect (False on a C library without ``mallopt``)."""
    mallopt = _libc("mallopt", [ctypes.c_int, ctypes.c_int])
    return mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def release_free_memory() -> bool:
    """Return the C heap's free pages to the system (glibc ``malloc_trim``). Returns whether it could."""
    trim = _libc("malloc_trim", [ctypes.c_size_t])
    return trim is not None and bool(trim(0))
