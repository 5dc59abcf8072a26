"""``dedupectl repartition``: adding input partitions without a window of duplicates (plan, build, cutover)."""
