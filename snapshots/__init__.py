"""Snapshots of partition stores (RocksDB checkpoints plus a manifest) to a local directory, S3 or EBS, their
restore, and moving a partition's EBS volume between instances (``dedupectl snapshot …``, ``reattach``)."""
