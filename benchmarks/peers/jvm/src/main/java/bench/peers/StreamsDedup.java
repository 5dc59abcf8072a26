package bench.peers;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.internals.DefaultKafkaClientSupplier;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * Kafka Streams, exactly_once_v2: the standard dedup pattern. A persistent (RocksDB) key-value store keyed by
 * the messageId extracted from the JSON value holds each id's record timestamp; the first occurrence is
 * forwarded to the output, later ones are dropped; a record without a usable messageId goes to the dead-letter
 * topic. A wall-clock punctuator deletes ids older than the window (TTL) every {@code --purge-seconds}.
 * Everything else is Kafka Streams' default: a changelog topic for the store, a commit (one transaction per
 * stream thread) every 100 ms. Stops after {@code --idle-seconds} without input.
 *
 * <pre>java -cp ... bench.peers.StreamsDedup BOOTSTRAP INPUT OUTPUT STATE_DIR [--group G] [--threads N]
 *     [--window-seconds S] [--purge-seconds S] [--idle-seconds S] [--dead-letter-topic T]</pre>
 *
 * Instrumentation, not behaviour: the producers are KafkaProducers whose commitTransaction notes when each
 * transaction completed, so the app reports its own first-consumed/last-committed times (see Progress).
 */
public final class StreamsDedup {
    static final String STORE = "seen-ids";
    private static final JsonFactory JSON = new JsonFactory();
    private static final int SESSION_TIMEOUT_MS = 10_000; // as every peer: see benchmarks/peers/_common.py

    public static void main(String[] argv) throws InterruptedException {
        Args args = new Args(argv, 4, "StreamsDedup BOOTSTRAP INPUT OUTPUT STATE_DIR [--group G] [--threads N] ...");
        String bootstrap = args.positional.get(0), input = args.positional.get(1);
        String output = args.positional.get(2), stateDir = args.positional.get(3);
        String group = args.get("group", "bench-kstreams-" + output);
        int threads = (int) args.number("threads", 1);
        long windowMs = (long) (args.number("window-seconds", 24 * 3600) * 1000);
        long purgeMs = (long) (args.number("purge-seconds", 3600) * 1000);
        double idleSeconds = args.number("idle-seconds", 3);
        String deadLetter = args.get("dead-letter-topic", input + ".dead-letter");

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, group);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1); // one broker
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), SESSION_TIMEOUT_MS);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

        Progress progress = new Progress();
        Topology topology = new Topology();
        topology.addSource("input", new ByteArrayDeserializer(), new ByteArrayDeserializer(), input);
        topology.addProcessor("dedup", () -> new FirstSighting(progress, windowMs, purgeMs), "input");
        topology.addStateStore(
                Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.Long()),
                "dedup");
        topology.addSink("output", output, new ByteArraySerializer(), new ByteArraySerializer(), "dedup");
        topology.addSink("dead-letter", deadLetter, new ByteArraySerializer(), new ByteArraySerializer(), "dedup");

        AtomicReference<Throwable> failure = new AtomicReference<>();
        KafkaStreams streams = new KafkaStreams(topology, props, new TimedCommits(progress));
        streams.setUncaughtExceptionHandler(error -> {
            failure.compareAndSet(null, error);
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        // joining the group and a rebalance after a crash take a while: the first record gets longer
        double startupSeconds = 2.0 * SESSION_TIMEOUT_MS / 1000 + idleSeconds;
        long started = System.nanoTime();
        while (failure.get() == null && streams.state().isRunningOrRebalancing()) {
            double idle = progress.secondsSinceLastConsumed();
            if (idle < 0 ? (System.nanoTime() - started) / 1e9 > startupSeconds : idle > idleSeconds) {
                break;
            }
            Thread.sleep(100);
        }
        streams.close(Duration.ofSeconds(60));
        if (failure.get() != null || streams.state() == KafkaStreams.State.ERROR) {
            Throwable error = failure.get();
            System.err.println("kafka streams failed: " + (error == null ? streams.state() : error));
            System.exit(1);
        }
        progress.emit(Map.of("threads", threads));
    }

    /** Forwards the first record of each messageId, drops the rest, routes records without one to dead letters. */
    static final class FirstSighting implements Processor<byte[], byte[], byte[], byte[]> {
        private final Progress progress;
        private final long windowMs;
        private final long purgeMs;
        private ProcessorContext<byte[], byte[]> context;
        private KeyValueStore<String, Long> seen;

        FirstSighting(Progress progress, long windowMs, long purgeMs) {
            this.progress = progress;
            this.windowMs = windowMs;
            this.purgeMs = purgeMs;
        }

        @Override
        public void init(ProcessorContext<byte[], byte[]> context) {
            this.context = context;
            this.seen = context.getStateStore(STORE);
            context.schedule(Duration.ofMillis(purgeMs), PunctuationType.WALL_CLOCK_TIME, this::purge);
        }

        @Override
        public void process(Record<byte[], byte[]> record) {
            progress.consumedSome(1);
            String id = messageId(record.value());
            if (id == null) {
                context.forward(record, "dead-letter");
                return;
            }
            if (seen.get(id) != null) {
                return;
            }
            seen.put(id, record.timestamp());
            context.forward(record, "output");
            progress.publishedSome(1);
        }

        private void purge(long now) {
            try (KeyValueIterator<String, Long> all = seen.all()) {
                while (all.hasNext()) {
                    KeyValue<String, Long> entry = all.next();
                    if (entry.value < now - windowMs) {
                        seen.delete(entry.key);
                    }
                }
            }
        }
    }

    /** The top-level "messageId" string of a JSON object; null if absent, empty, not a string, or not JSON. */
    static String messageId(byte[] value) {
        if (value == null) {
            return null;
        }
        try (JsonParser parser = JSON.createParser(value)) {
            if (parser.nextToken() != JsonToken.START_OBJECT) {
                return null;
            }
            while (parser.nextToken() == JsonToken.FIELD_NAME) {
                String field = parser.currentName();
                JsonToken token = parser.nextToken();
                if ("messageId".equals(field)) {
                    return token == JsonToken.VALUE_STRING && !parser.getText().isEmpty() ? parser.getText() : null;
                }
                parser.skipChildren();
            }
            return null;
        } catch (java.io.IOException notJson) {
            return null;
        }
    }

    /** Kafka Streams' own clients, with producers that note when each transaction has committed. */
    static final class TimedCommits extends DefaultKafkaClientSupplier {
        private final Progress progress;

        TimedCommits(Progress progress) {
            this.progress = progress;
        }

        @Override
        public Producer<byte[], byte[]> getProducer(Map<String, Object> config) {
            return new KafkaProducer<>(config, new ByteArraySerializer(), new ByteArraySerializer()) {
                @Override
                public void commitTransaction() {
                    super.commitTransaction();
                    progress.committed();
                }
            };
        }
    }
}
