"""dedupectl: exactly-once deduplication for Kafka."""

__version__ = "0.1.0"
