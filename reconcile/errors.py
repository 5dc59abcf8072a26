"""Errors of reading Kafka: the broker, its topics, fencing, offset or time ranges, and an output that lost
offsets a store needs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from store.errors import DedupeError

if TYPE_CHECKING:  # an annotation only: every command's start-up imports these errors
    from store.codec import OutputGap


class BrokerError(DedupeError):
    """Kafka is unreachable or refused an operation."""


class TopicError(BrokerError):
    """A topic is missing or does not match what the worker needs."""


class PermissionDeniedError(BrokerError):
    """Kafka's authorizer denied an operation: the principal lacks an ACL, which the message names."""

    exit_code = 77  # EX_NOPERM: an ACL, not the configuration or the data, needs the operator


class AuthenticationError(BrokerError):
    """The broker refused the client's credentials or its TLS handshake: not transient, the operator must act."""

    exit_code = 77


class FencedError(BrokerError):
    """Another worker took over this worker's partitions or transactional id."""


class RangeError(DedupeError):
    """An offset or time range is malformed, reversed, or holds no records."""


class Interrupted(DedupeError):
    """The operator interrupted a comparison; every batch written before was one atomic write."""

    exit_code = 130


class BrokerUnavailableError(BrokerError):
    """Kafka did not answer in time: transient (a broker restarting, a network blip), so worth a retry."""


class OutputGapError(DedupeError):
    """The output no longer holds offsets a store needs to be made exact (``reconcile.gaps``): the partition is
    refused until an operator acts. Not a broker error: no retry brings deleted records back."""

    exit_code = 3

    def __init__(self, message: str, hint: str | None, gap: OutputGap, partition: int) -> None:
        super().__init__(message, hint)
        self.gap = gap
        self.partition = partition
