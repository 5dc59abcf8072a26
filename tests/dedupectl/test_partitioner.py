"""The partitioners ``dedupectl trace`` assumes: murmur2 against the vectors of Kafka's own UtilsTest, and both
against the partition librdkafka (a real producer on the project's broker) actually chose."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from dedupectl.partitioner import crc32_partition, murmur2, murmur2_array, murmur2_partition, partitions_of

# org.apache.kafka.common.utils.UtilsTest.testMurmur2
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS.items())
def test_murmur2_matches_kafkas_own_test_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(
    ("librdkafka_partitioner", "ours"), [("murmur2_random", murmur2_partition), ("consistent_random", crc32_partition)]
)
def test_the_partition_is_the_one_librdkafka_chose(make_pipeline, librdkafka_partitioner: str, ours) -> None:
    pipeline = make_pipeline(partitions=7)
    producer = Producer({"bootstrap.servers": pipeline.kafka.bootstrap_servers, "partitioner": librdkafka_partitioner})
    chosen: dict[bytes, int] = {}
    keys = [f"msg-{n}-{'x' * (n % 5)}".encode() for n in range(200)]
    for key in keys:
        producer.produce(
            pipeline.input_topic, key=key, value=b"{}", on_delivery=lambda e, m: chosen.update({m.key(): m.partition()})
        )
    assert producer.flush(30) == 0
    assert len(set(chosen.values())) == 7
    assert all(chosen[key] == ours(key, 7) for key in keys)


def test_the_batch_hash_is_the_one_key_at_a_time_hash_for_every_length() -> None:
    keys = [bytes(range(length % 256)) * 1 for length in range(0, 70)] + list(KAFKA_VECTORS) + [b"x" * 37] * 3
    assert murmur2_array(keys).tolist() == [murmur2(key) & 0xFFFFFFFF for key in keys]
    for partitions in (1, 2, 7, 64):
        assert partitions_of(keys, partitions, "murmur2").tolist() == [murmur2_partition(k, partitions) for k in keys]
        assert partitions_of(keys, partitions, "crc32").tolist() == [crc32_partition(k, partitions) for k in keys]
    assert partitions_of([], 4, "murmur2").tolist() == partitions_of([], 4, "crc32").tolist() == []
