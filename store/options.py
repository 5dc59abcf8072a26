"""RocksDB options for the dedup store.

The ``ids`` generations (``store.generations``) are leveled families, each compacted into one sorted run
once it is sealed. That run is the last level, and it has no bloom filter (``optimize_filters_for_hits``):
a lookup reaches a generation only when the id filter says it may hold the id, so the run's index finds the
one data block to read, and a filter there would only cost memory (2 bytes per id at 16 bits). The newest
generation's upper levels and L0 files keep full 16-bit filters while it is written. Data blocks are 1 KiB,
lz4 above the last level (data passing through) and zstd on it once sealed (data that stays; the generation
being written keeps lz4 there too, since its merges rewrite that level): a duplicate's lookup decompresses
one small block. Filters and indexes stay in the table readers (not in the block cache), and
every table stays open (``max_open_files = -1``). Figures: docs/benchmarks.md, "Figures behind design
choices".
"""

from __future__ import annotations

from dataclasses import dataclass

from rocksdict import (
    BlockBasedOptions,
    BottommostLevelCompaction,
    Cache,
    CompactOptions,
    DBCompactionStyle,
    DBCompressionType,
    Options,
    ReadOptions,
    WriteBufferManager,
)

from store.codec import CF_META, CF_TIMES

BLOOM_BITS_PER_KEY = 16
BLOCK_CACHE_BYTES = 8 * 1024 * 1024  # data blocks only: what duplicates (rare) and filter false positives read
# zstd 12 instead of the default 3: fewer bytes per id for background CPU at flush (random bytes leave little
# else to gain); decompression, i.e. lookups, costs the same
IDS_ZSTD_LEVEL = 12
WRITE_BUFFER_BYTES = 64 * 1024 * 1024
WAL_BYTES_KEPT = WRITE_BUFFER_BYTES  # an ids memtable's log is about 60% of its size: it is not flushed early
ARENA_BLOCKS_PER_BUFFER = 64
MIN_ARENA_BLOCK_BYTES = 64 * 1024
SMALL_FAMILY_ARENA_BYTES = 64 * 1024  # times and meta take a few KiB per batch: a 1 MiB default block is waste
LOG_FILE_BYTES = 16 * 1024 * 1024
LOG_FILES_KEPT = 10  # the LOG is what `dedupectl compactions` and `stats` read
STATS_DUMP_SECONDS = 300

# a duplicate's lookup reads and decompresses one block, most of its cost once the store outgrows the caches:
# a smaller block costs less, for a little more disk per id (docs/benchmarks.md, "Figures behind design
# choices")
GENERATION_BLOCK_BYTES = 1024
GENERATION_RESTART_INTERVAL = 16
# index entries share their keys' prefixes in runs of 16: every index stays in memory, and one entry per small
# block would cost several times more of it
GENERATION_INDEX_RESTART_INTERVAL = 16


def _table(cache: Cache, block_bytes: int, filtered: bool = True) -> BlockBasedOptions:
    table = BlockBasedOptions()
    if filtered:
        table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)  # full (not block-based) filters
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(False)
    table.set_block_size(block_bytes)
    table.set_format_version(5)
    return table


def generation_options(
    cache: Cache,
    write_buffer_bytes: int = WRITE_BUFFER_BYTES,
    *,
    filtered: bool = True,
    zstd_level: int = IDS_ZSTD_LEVEL,
) -> Options:
    """A generation's family; ``filtered=False`` for SST files written apart (bulk load, migration) that go
    straight to the last level, where the family keeps no filter either."""
    options = Options(raw_mode=True)
    table = _table(cache, GENERATION_BLOCK_BYTES, filtered)
    table.set_block_restart_interval(GENERATION_RESTART_INTERVAL)
    table.set_index_block_restart_interval(GENERATION_INDEX_RESTART_INTERVAL)
    options.set_block_based_table_factory(table)
    options.set_compaction_style(DBCompactionStyle.level())
    options.set_level_compaction_dynamic_level_bytes(True)
    options.set_optimize_filters_for_hits(True)  # no filter on the last level: the sealed run
    options.set_compression_type(DBCompressionType.lz4())
    options.set_bottommost_compression_type(DBCompressionType.zstd())
    options.set_bottommost_compression_options(-14, zstd_level, 0, 0, True)  # window bits, level, strategy, dict
    options.set_compression_options(-14, zstd_level, 0, 0)  # what an SST file writer uses for its one file
    options.set_write_buffer_size(write_buffer_bytes)
    # a memtable bloom filter (an absent id skips the skip list), allocated whole with each memtable: about 10
    # bits per id of a full one
    options.set_memtable_prefix_bloom_ratio(0.02)
    options.set_arena_block_size(max(write_buffer_bytes // ARENA_BLOCKS_PER_BUFFER, MIN_ARENA_BLOCK_BYTES))
    options.set_memtable_whole_key_filtering(True)
    return options


# The generation being written keeps lz4 on its last level too: its merges rewrite that level again and
# again, and zstd at IDS_ZSTD_LEVEL costs several times more CPU per pass; its seal writes zstd, once.
WRITTEN_GENERATION_OPTIONS = {"bottommost_compression": "kLZ4Compression"}

# A sealed generation is written no more (but for reconcile's rare repairs): its next memtables need neither
# the newest's size nor its bloom filter, which RocksDB allocates whole with every memtable, even empty.
SEALED_GENERATION_OPTIONS = {
    "write_buffer_size": str(4 * 1024 * 1024),
    "arena_block_size": str(MIN_ARENA_BLOCK_BYTES),
    "memtable_prefix_bloom_size_ratio": "0",
    "bottommost_compression": "kZSTD",
}


def older_generation_reads() -> ReadOptions:
    """Reads of a generation older than the newest: they do not fill the block cache. Its blocks are read again
    only as often as an old id comes back, while the newest one's are its recent duplicates."""
    read = ReadOptions()
    read.fill_cache(False)
    return read


def seal_options() -> CompactOptions:
    """A manual compaction that rewrites a generation into its last level, even a lone file (a trivial move
    would keep its filter and lz4 blocks), once: "force" would compact the run it has just written again."""
    options = CompactOptions()
    options.set_bottommost_level_compaction(BottommostLevelCompaction.force_optimized())
    options.set_exclusive_manual_compaction(False)  # flushes and other compactions go on meanwhile
    return options


@dataclass(frozen=True)
class SharedMemory:
    """What the stores of one worker share, so that its memory does not grow with its partition count.

    - ``write_buffers``: one memtable budget. The partitions of a worker fill their memtables in step, so
      memtables of their own would be released together at their flushes: a saw-tooth in the worker's RSS
      that grows with the partition count. Under the budget the store written to flushes once all memtables
      together pass about 7/8 of it.
    - ``ids_write_buffer_bytes``: each store's ``ids`` memtable size, at most half the budget. A memtable
      charges the budget from its creation with its bloom filter and first arena blocks, sized from the
      write buffer: sized from a full budget, a few stores under a small budget would be over it while empty,
      and every write would flush all three families (files of a few dozen bytes).
    - ``block_cache``: one cache for data blocks, not one per store. The worker reads data blocks only for
      duplicates and filter false positives, spread at random over its stores: a cache per store would only
      add up (and fill slowly, over millions of ids).
    """

    write_buffers: WriteBufferManager
    block_cache: Cache
    ids_write_buffer_bytes: int = WRITE_BUFFER_BYTES


def shared_memory(memtable_bytes: int, block_cache_bytes: int = BLOCK_CACHE_BYTES) -> SharedMemory:
    # never stall writers on the budget: a flush is always under way when it is reached
    return SharedMemory(
        WriteBufferManager(memtable_bytes, False),
        Cache(block_cache_bytes),
        ids_write_buffer_bytes=min(WRITE_BUFFER_BYTES, memtable_bytes // 2),
    )


def _level_options(cache: Cache) -> Options:
    options = Options(raw_mode=True)
    options.set_block_based_table_factory(_table(cache, 4 * 1024))
    options.set_compression_type(DBCompressionType.lz4())
    options.set_bottommost_compression_type(DBCompressionType.zstd())
    options.set_level_compaction_dynamic_level_bytes(True)
    options.set_write_buffer_size(8 * 1024 * 1024)  # timestamps and metadata are small
    options.set_arena_block_size(SMALL_FAMILY_ARENA_BYTES)
    return options


def store_options(
    create: bool, shared: SharedMemory | None = None, generations: tuple[str, ...] = ()
) -> tuple[Options, dict[str, Options], Options]:
    """Return the DB options, the options of each column family on disk (``times``, ``meta`` and the named
    ``generations``), and the options for a new generation, all
    sharing one block cache: the store's own, or with ``shared`` the worker's, along with its memtable budget
    (see ``SharedMemory``)."""
    cache = Cache(BLOCK_CACHE_BYTES) if shared is None else shared.block_cache
    options = _level_options(cache)
    if shared is not None:
        options.set_write_buffer_manager(shared.write_buffers)
        # a flush the budget asks for takes the oldest memtable of the store written to: without atomic
        # flushes that is as often the meta or times family's (a few KiB freed) as the ids family's
        options.set_atomic_flush(True)
    options.create_if_missing(create)
    options.create_missing_column_families(create)
    options.set_max_open_files(-1)  # filters stay loaded; also required by secondary instances
    options.set_max_background_jobs(2)
    # the small families (times, meta) flush rarely and would keep every log file since their last flush: a
    # restart after a kill replays all of them. Past this total the families holding the oldest log flush.
    options.set_max_total_wal_size(WAL_BYTES_KEPT)
    options.set_keep_log_file_num(LOG_FILES_KEPT)
    options.set_max_log_file_size(LOG_FILE_BYTES)
    options.set_stats_dump_period_sec(STATS_DUMP_SECONDS)
    options.enable_statistics()  # bloom-filter usefulness, dumped to the LOG with the compaction stats
    ids_buffer = WRITE_BUFFER_BYTES if shared is None else shared.ids_write_buffer_bytes
    families = {CF_TIMES: _level_options(cache), CF_META: _level_options(cache)}
    for name in generations:
        families[name] = generation_options(cache, ids_buffer)
    return options, families, generation_options(cache, ids_buffer)
