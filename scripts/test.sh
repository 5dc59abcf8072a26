#!/usr/bin/env bash
# The whole test suite (unit and integration: a real Kafka broker, RocksDB, moto, Spark), after setup.
# Extra arguments go to pytest, e.g. scripts/test.sh -k worker
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
ruff check .
exec python -m pytest "$@"
