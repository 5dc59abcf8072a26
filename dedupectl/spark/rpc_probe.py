"""Does a Spark standalone master answer at host:port? One RPC round trip, no JVM.

A port that merely accepts connections proves nothing (a Kafka broker's port does): Spark's own client
would retry registering for a minute and then fail with a Java stack. Instead, the probe sends one RPC
request in Spark's transport framing, with a body no endpoint can decode, and waits for Spark's reply.

Framing (Spark's ``network-common`` ``MessageEncoder``), big-endian:

    request:  frame length (int64, counts itself) | type 3 = RpcRequest (int8) | request id (int64)
              | body length (int32) | body
    reply:    frame length (int64) | type 4 = RpcResponse or 5 = RpcFailure (int8) | request id (int64) | …

Any Spark RPC server answers an undecodable request with an ``RpcFailure`` carrying the request's id; a
server that is not Spark closes the connection, stays silent or answers something else.
"""

from __future__ import annotations

import socket
import struct

RPC_REQUEST, RPC_RESPONSE, RPC_FAILURE = 3, 4, 5
PROBE_REQUEST_ID = 0x00DE_D0BE
_REPLY_HEAD = struct.Struct(">qbq")  # frame length, message type, request id


def probe_request() -> bytes:
    body = b"\x00"  # not a RequestMessage: the server must reply with an RpcFailure
    message = struct.pack(">bqi", RPC_REQUEST, PROBE_REQUEST_ID, len(body)) + body
    return struct.pack(">q", 8 + len(message)) + message


def is_spark_reply(head: bytes) -> bool:
    """True when ``head`` (the reply's first bytes) is Spark's answer to the probe request."""
    if len(head) < _REPLY_HEAD.size:
        return False
    length, kind, request_id = _REPLY_HEAD.unpack_from(head)
    return kind in (RPC_RESPONSE, RPC_FAILURE) and request_id == PROBE_REQUEST_ID and length >= _REPLY_HEAD.size


def spark_rpc_problem(host: str, port: int, timeout_s: float, *, speak: bool = True) -> str | None:
    """None when a Spark RPC server answers at ``host:port``; else why not, in a few words.

    ``speak=False`` only connects (for a master that requires authentication or TLS before any request)."""
    try:
        connection = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as error:
        return str(error.strerror or error)
    with connection:
        if not speak:
            return None
        try:
            connection.sendall(probe_request())
            head = _read(connection, _REPLY_HEAD.size)
        except TimeoutError:
            return f"something listens but gave no Spark reply within {timeout_s:g}s: not a Spark master"
        except OSError as error:
            return f"something listens but dropped the connection ({error.strerror or error}): not a Spark master"
    if is_spark_reply(head):
        return None
    if not head:
        return "something listens but closed the connection: not a Spark master"
    return "something listens but answers in another protocol: not a Spark master"


def _read(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data
