"""RocksDB options for the dedup store.

Nearly every lookup is for an id never seen, so the bloom filter on the *last* level is what saves a disk
read: filters are built on every level (never ``optimize_filters_for_hits``), about 10 bits per key.
"""

from __future__ import annotations

from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options

from store.codec import COLUMN_FAMILIES

BLOOM_BITS_PER_KEY = 10
BLOCK_CACHE_BYTES = 64 * 1024 * 1024


def _family_options(cache: Cache) -> Options:
    options = Options(raw_mode=True)
    table = BlockBasedOptions()
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)  # full (not block-based) filters
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    options.set_block_based_table_factory(table)
    options.set_compression_type(DBCompressionType.lz4())
    options.set_bottommost_compression_type(DBCompressionType.zstd())
    options.set_level_compaction_dynamic_level_bytes(True)
    return options


def store_options(create: bool) -> tuple[Options, dict[str, Options]]:
    """Return the DB options and the per-column-family options, sharing one block cache."""
    cache = Cache(BLOCK_CACHE_BYTES)
    options = _family_options(cache)
    options.create_if_missing(create)
    options.create_missing_column_families(create)
    options.set_max_background_jobs(2)
    options.set_keep_log_file_num(10)  # the LOG is what `dedupectl compactions` reads
    options.set_stats_dump_period_sec(600)
    return options, {name: _family_options(cache) for name in COLUMN_FAMILIES}
