"""The systems ``benchmarks/bench_peers.py`` runs against dedupectl, and the harness that runs them.

Each peer is a script run in its own process (for a fair peak RSS) that reads the input topic with a group
of its own, writes an output topic of its own, and prints one JSON object on stdout (see ``_common.Progress``):

- ``copy_floor.py``: a bare transactional copy input -> output, no dedup: the floor cost of Kafka from Python.
- ``naive.py``: the seed's naive loop: one RocksDB lookup, one produce, one transaction per message.
- ``redis_dedup.py``: ``SET messageId 1 NX EX window`` in front of a plain consumer/producer.
- ``quix_app.py``: a Quix Streams Application, exactly-once, a stateful filter with RocksDB state and a TTL.
- ``jvm/``: a Maven project (built by ``jvm_build``) with ``StreamsDedup``, a Kafka Streams exactly_once_v2
  app with a persistent key-value store of messageIds, and ``TransactionalCopy``, the copy floor in Java; the
  same build fetches kafka-tools, whose perf tools run on the broker's own jars (the ceiling).

Peer scripts import only ``_common`` (stdlib and confluent-kafka), never dedupectl: the Quix and Redis peers
run in their own virtualenv (quixstreams pins an older confluent-kafka than the project's). The harness
modules (``env``, ``jvm_build``, ``probes``, ``systems``, ``runner``, ``report``) run in the project's environment.
"""
