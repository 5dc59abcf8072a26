"""``produce_all`` against a real broker: every record once, in order, with its key, timestamp and headers, also
when the producer's local queue fills up partway through."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from dedupectl.config import KafkaConfig
from dedupectl.kafka_clients import create_topics
from dedupectl.worker.clients import produce_all


def test_a_full_local_queue_holds_a_run_back_and_every_record_goes_once_in_order(kafka_broker, unique_name):
    kafka, topic = KafkaConfig(kafka_broker.bootstrap_servers), unique_name("produce-all")
    create_topics(kafka, [topic], 2)
    # a queue of 7 records: a run of 200 is refused many times and must go on from each refused record
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "queue.buffering.max.messages": 7})
    count = 200
    values = [f"value-{n}".encode() if n % 13 else None for n in range(count)]
    keys = [f"id-{n}".encode() for n in range(count)]
    timestamps = [1_700_000_000_000 + n for n in range(count)]
    headers = [[("n", str(n).encode())] if n % 3 else None for n in range(count)]
    produce_all(producer, topic, 1, values, keys, timestamps, headers)
    assert producer.flush(30) == 0

    consumer = Consumer(
        {"bootstrap.servers": kafka.bootstrap_servers, "group.id": unique_name("reader"), "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(topic, 1, 0)])
    records = []
    while not records or not records[-1].error():
        records += consumer.consume(100, 5.0)
    consumer.close()
    records = [record for record in records if not record.error()]
    assert [record.key() for record in records] == keys
    assert [record.value() for record in records] == values
    assert [record.timestamp()[1] for record in records] == timestamps
    assert [record.headers() for record in records] == headers
