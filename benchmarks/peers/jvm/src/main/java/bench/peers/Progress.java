package bench.peers;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A peer's own account of its run, printed as one JSON object on stdout: the same fields as the Python
 * peers' {@code _common.Progress}. Throughput is from the first record consumed to the last transaction
 * committed, on the process's own clock (seconds since the epoch, as Python's time.time()).
 * Thread-safe: a Kafka Streams app with several stream threads shares one.
 */
public final class Progress {
    private final AtomicLong consumed = new AtomicLong();
    private final AtomicLong published = new AtomicLong();
    private final AtomicLong commits = new AtomicLong();
    private final AtomicLong firstConsumedMicros = new AtomicLong(-1);
    private volatile long lastConsumedMicros = -1;
    private volatile long lastCommittedMicros = -1;

    private static long nowMicros() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000L;
    }

    public void consumedSome(long count) {
        if (count <= 0) {
            return;
        }
        long now = nowMicros();
        lastConsumedMicros = now;
        firstConsumedMicros.compareAndSet(-1, now);
        consumed.addAndGet(count);
    }

    public void publishedSome(long count) {
        published.addAndGet(count);
    }

    public void committed() {
        lastCommittedMicros = nowMicros();
        commits.incrementAndGet();
    }

    /** Seconds since the last record was consumed, or -1 before the first one. */
    public double secondsSinceLastConsumed() {
        long last = lastConsumedMicros;
        return last < 0 ? -1 : (nowMicros() - last) / 1e6;
    }

    public void emit(Map<String, Object> extra) {
        long first = firstConsumedMicros.get();
        long lastCommitted = lastCommittedMicros;
        double busy = first < 0 || lastCommitted < 0 ? 0.0 : Math.max(lastCommitted - first, 0) / 1e6;
        Map<String, Object> report = new LinkedHashMap<>();
        report.put("consumed", consumed.get());
        report.put("published", published.get());
        report.put("first_consumed_at", seconds(first));
        report.put("last_consumed_at", seconds(lastConsumedMicros));
        report.put("last_committed_at", seconds(lastCommitted));
        report.put("commits", commits.get());
        report.put("busy_seconds", Math.round(busy * 1000) / 1000.0);
        report.put("peak_rss_mb", peakRssMb());
        report.putAll(extra);
        System.out.println(toJson(report));
        System.out.flush();
    }

    private static Double seconds(long micros) {
        return micros < 0 ? null : micros / 1e6;
    }

    /** This process's peak resident set (VmHWM), as the Python peers report it. */
    static double peakRssMb() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) {
                    long kib = Long.parseLong(line.replaceAll("[^0-9]", ""));
                    return Math.round(kib / 1024.0 * 10) / 10.0;
                }
            }
        } catch (IOException | NumberFormatException ignored) {
            // not Linux: no figure rather than a wrong one
        }
        return 0.0;
    }

    private static String toJson(Map<String, Object> map) {
        StringBuilder out = new StringBuilder("{");
        for (Map.Entry<String, Object> entry : map.entrySet()) {
            if (out.length() > 1) {
                out.append(", ");
            }
            out.append('"').append(entry.getKey()).append("\": ");
            Object value = entry.getValue();
            if (value == null) {
                out.append("null");
            } else if (value instanceof Number || value instanceof Boolean) {
                out.append(value);
            } else {
                out.append('"').append(value.toString().replace("\\", "\\\\").replace("\"", "\\\"")).append('"');
            }
        }
        return out.append('}').toString();
    }
}
