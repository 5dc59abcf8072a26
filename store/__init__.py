"""The RocksDB dedup store of one input partition: how it works is on one page, docs/store.md; its bytes are
in ``store.codec``."""
