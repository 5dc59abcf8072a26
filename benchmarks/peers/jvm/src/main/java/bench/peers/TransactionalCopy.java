package bench.peers;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java floor: a bare transactional copy input -> output, batch by batch, no dedup: consume a batch, produce
 * it, send the input offsets, commit. The same batch and transaction size as dedupectl's defaults (up to 20,000
 * records per poll, one transaction per poll), the same partition out as in, a stable transactional.id (the
 * group) so a restarted copy fences its killed predecessor. Stops when every input partition is at its end;
 * with {@code --idle-seconds} it runs past the input's end (records still arriving: the latency run) and stops
 * after that long without a record.
 *
 * <pre>java -cp ... bench.peers.TransactionalCopy BOOTSTRAP INPUT OUTPUT [--group G] [--max-seconds S]
 *     [--idle-seconds S]</pre>
 */
public final class TransactionalCopy {
    static final int BATCH = 20_000; // dedupectl's batch_max_messages; benchmarks/peers/_common.py BATCH

    public static void main(String[] argv) {
        Args args = new Args(argv, 3, "TransactionalCopy BOOTSTRAP INPUT OUTPUT [--group G] [--max-seconds S]");
        String bootstrap = args.positional.get(0), input = args.positional.get(1), output = args.positional.get(2);
        String group = args.get("group", "bench-java-copy-" + output);
        long deadline = System.nanoTime() + (long) (args.number("max-seconds", 3600) * 1e9);
        double idleSeconds = args.number("idle-seconds", 0);
        // joining the group takes a while: the first record gets longer, as in StreamsDedup
        double startupSeconds = 2.0 * 10_000 / 1000 + idleSeconds;
        long started = System.nanoTime();

        Properties consumerProps = new Properties();
        consumerProps.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        consumerProps.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        consumerProps.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        consumerProps.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        consumerProps.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        consumerProps.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10_000);
        consumerProps.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, BATCH);
        consumerProps.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, 64 * 1024 * 1024); // as dedupectl's consumer
        Properties producerProps = new Properties();
        producerProps.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        producerProps.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, group);
        producerProps.put(ProducerConfig.LINGER_MS_CONFIG, 5); // as dedupectl's producer
        producerProps.put(ProducerConfig.BATCH_SIZE_CONFIG, 1_000_000); // librdkafka's default batch.size

        Progress progress = new Progress();
        try (KafkaConsumer<byte[], byte[]> consumer =
                        new KafkaConsumer<>(consumerProps, new ByteArrayDeserializer(), new ByteArrayDeserializer());
                KafkaProducer<byte[], byte[]> producer =
                        new KafkaProducer<>(producerProps, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            int partitions = consumer.partitionsFor(input).size();
            consumer.subscribe(Set.of(input));
            while (System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                if (records.isEmpty()) {
                    if (idleSeconds > 0) {
                        double idle = progress.secondsSinceLastConsumed();
                        if (idle < 0 ? (System.nanoTime() - started) / 1e9 > startupSeconds : idle > idleSeconds) {
                            break;
                        }
                    } else if (atEnd(consumer, partitions)) {
                        break;
                    }
                    continue;
                }
                progress.consumedSome(records.count());
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    producer.send(new ProducerRecord<>(output, record.partition(), record.timestamp(), record.key(),
                            record.value(), record.headers()));
                    next.put(new TopicPartition(input, record.partition()), new OffsetAndMetadata(record.offset() + 1));
                }
                producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
                producer.commitTransaction();
                progress.publishedSome(records.count());
                progress.committed();
            }
        }
        progress.emit(Map.of());
    }

    /** Every input partition assigned and read up to its last stable offset. */
    private static boolean atEnd(KafkaConsumer<byte[], byte[]> consumer, int partitions) {
        Set<TopicPartition> assigned = consumer.assignment();
        if (assigned.size() < partitions) {
            return false;
        }
        Map<TopicPartition, Long> ends = consumer.endOffsets(assigned);
        return assigned.stream().allMatch(tp -> consumer.position(tp) >= ends.get(tp));
    }
}
