#!/usr/bin/env bash
# The whole test suite (unit and integration: a real Kafka broker, RocksDB, moto, Spark), after setup, on the
# default Kafka; then the tests marked kafka_compat (the worker's exactly-once, fencing and crash tests) again
# on the previous Kafka line ($previous_kafka_version, set by setup.sh).
# Extra arguments go to pytest and run one pass only, e.g. scripts/test.sh -k worker --kafka-version 3.9.1
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
ruff check .
if [ "$#" -gt 0 ]; then
  exec python -m pytest "$@"
fi
python -m pytest
python -m pytest -m kafka_compat --kafka-version "$previous_kafka_version"
