package bench.peers;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** Positional arguments and {@code --name value} options, as the Python peers take them. */
final class Args {
    final List<String> positional = new ArrayList<>();
    private final Map<String, String> options = new HashMap<>();

    Args(String[] argv, int positionalCount, String usage) {
        for (int i = 0; i < argv.length; i++) {
            if (argv[i].startsWith("--") && i + 1 < argv.length) {
                options.put(argv[i].substring(2), argv[++i]);
            } else {
                positional.add(argv[i]);
            }
        }
        if (positional.size() != positionalCount) {
            System.err.println("usage: " + usage);
            System.exit(2);
        }
    }

    String get(String name, String fallback) {
        return options.getOrDefault(name, fallback);
    }

    double number(String name, double fallback) {
        return Double.parseDouble(get(name, Double.toString(fallback)));
    }
}
