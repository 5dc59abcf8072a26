"""The systems ``benchmarks/bench_peers.py`` runs against dedupectl, and the harness that runs them.

Each peer is a script run in its own process (for a fair peak RSS) that reads the input topic with a group
of its own, writes an output topic of its own, and prints one JSON object on stdout (see ``_common.Progress``):

- ``copy_floor.py``: a bare transactional copy input -> output, no dedup: the floor cost of Kafka from Python.
- ``naive.py``: the seed's naive loop: one RocksDB lookup, one produce, one transaction per message.
- ``redis_dedup.py``: ``SET messageId 1 NX EX window`` in front of a plain consumer/producer.
- ``quix_app.py``: a Quix Streams Application, exactly-once, a stateful filter with RocksDB state and a TTL.

Peer scripts import only ``_common`` (stdlib and confluent-kafka), never dedupectl: the Quix and Redis peers
run in their own virtualenv (quixstreams pins an older confluent-kafka than the project's). The harness
modules (``env``, ``probes``, ``systems``, ``runner``, ``report``) run in the project's environment.
"""
