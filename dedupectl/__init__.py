"""dedupectl: exactly-once deduplication for Kafka."""

from importlib.metadata import version

__version__ = version("dedupectl")  # pyproject.toml is the one source
