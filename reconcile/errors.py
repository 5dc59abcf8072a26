"""Errors of reading Kafka: the broker, its topics, fencing, and offset or time ranges."""

from __future__ import annotations

from store.errors import DedupeError


class BrokerError(DedupeError):
    """Kafka is unreachable or refused an operation."""


class TopicError(BrokerError):
    """A topic is missing or does not match what the worker needs."""


class FencedError(BrokerError):
    """Another worker took over this worker's partitions or transactional id."""


class RangeError(DedupeError):
    """An offset or time range is malformed, reversed, or holds no records."""


class Interrupted(DedupeError):
    """The operator interrupted a comparison; every batch written before was one atomic write."""

    exit_code = 130


class BrokerUnavailableError(BrokerError):
    """Kafka did not answer in time: transient (a broker restarting, a network blip), so worth a retry."""
