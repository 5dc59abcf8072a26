"""Telling a failed TLS or SASL handshake from a broker that is down.

librdkafka reports both the same way to the call that failed (a timeout, "all brokers down"); the difference
is only in the error events and log lines it raised meanwhile. A broker that is down is worth retrying; a
handshake the broker refuses (wrong password, a CA that does not sign its certificate, no client
certificate on an mTLS listener, a SASL mechanism it does not enable, a plaintext client on a TLS listener)
fails the same way at every try, and the operator must change one setting. This module is the one place
that reads those events and names the setting; ``reconcile.kafka`` gives its clients a ``HandshakeWatch``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from confluent_kafka import KafkaError

from reconcile.errors import AuthenticationError

librdkafka_log = logging.getLogger("dedupectl.librdkafka")
SECURITY_DOC = "docs/reference/security.md"

_SASL = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
_TLS = frozenset({KafkaError._SSL, KafkaError._TRANSPORT})

# (codes, pattern of librdkafka's text, the setting to check): the first that matches names the fault
RULES = (
    (
        _SASL,
        r"unsupported SASL mechanism|mechanism handshake failed",
        "sasl.mechanism (one the broker's listener enables)",
    ),
    (_SASL, r"", "sasl.username and sasl.password"),
    (_TLS, r"certificate verify failed", "ssl.ca.location (the CA that signed the brokers' certificates)"),
    (
        _TLS,
        r"bad certificate|certificate required|unknown ca|no certificate",
        "ssl.certificate.location and ssl.key.location (a client certificate the broker trusts)",
    ),
    (_TLS, r"wrong version number|packet length too long|record layer", "security.protocol (the listener's protocol)"),
    (frozenset({KafkaError._SSL}), r"", "security.protocol and ssl.ca.location"),
    (_TLS, r"SSL handshake failed|ssl/tls alert", "security.protocol and ssl.ca.location"),
)
# A client without TLS on a TLS listener: the broker closes each connection at the client's first request.
_PLAINTEXT_ON_TLS = re.compile(r"Disconnected.*(while requesting ApiVersion|in state APIVERSION_QUERY)")
PLAINTEXT_ON_TLS_AFTER = 3  # closed connections before it is taken for that, not a broker restarting


@dataclass(frozen=True)
class HandshakeFault:
    detail: str  # librdkafka's words
    setting: str  # what the operator checks

    def error(self, bootstrap_servers: str) -> AuthenticationError:
        return AuthenticationError(
            f"Kafka at {bootstrap_servers} refused this client's connection ({self.detail})",
            f"check {self.setting} ({SECURITY_DOC})",
        )


def classify(error: KafkaError) -> HandshakeFault | None:
    """The handshake fault an error event reports, or None for anything else (a broker down, a timeout)."""
    text = error.str()
    for codes, pattern, setting in RULES:
        if error.code() in codes and re.search(pattern, text, re.IGNORECASE):
            return HandshakeFault(text, setting)
    return None


class HandshakeWatch:
    """A client's ``error_cb`` and ``logger``: keeps the first handshake fault among its events; log lines go
    on to the ``dedupectl.librdkafka`` logger."""

    def __init__(self) -> None:
        self.fault: HandshakeFault | None = None
        self._closed_at_first_request = 0

    def error_cb(self, error: KafkaError) -> None:
        self.fault = self.fault or classify(error)

    def log(self, level: int, message: str, *args: object) -> None:
        librdkafka_log.log(level, message, *args)
        text = message % args if args else message
        if _PLAINTEXT_ON_TLS.search(text):
            self._closed_at_first_request += 1
            if self._closed_at_first_request >= PLAINTEXT_ON_TLS_AFTER and self.fault is None:
                self.fault = HandshakeFault(
                    "it closed every connection while requesting ApiVersion: the listener expects TLS",
                    "security.protocol (SSL or SASL_SSL on a TLS listener)",
                )

    def settings(self) -> dict[str, object]:
        return {"error_cb": self.error_cb, "logger": self}
