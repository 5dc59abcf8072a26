#!/usr/bin/env bash
# Install everything the project needs into .venv (idempotent; fast when already done):
# the package with its dev extras from PyPI, and the Kafka broker jars (two versions) from Maven Central.
# Needs: python3.11+, java 17, maven. Usage: bash scripts/setup.sh (demo.sh, test.sh and bench.sh source it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DEDUPECTL_VENV:-$root/.venv}"
for tool in python3 java mvn; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed (need Python 3.11+, Java 17, Maven)" >&2; exit 2; }
done
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: python3 is $(python3 -V 2>&1); dedupectl needs 3.11+" >&2; exit 2; }
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
stamp="$venv/.installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -e "$root[dev]"
  touch "$stamp"
fi
# The broker's default Kafka (tools/kafka/pom.xml) and the previous line, which test.sh also runs the
# worker's exactly-once tests against (a shell variable: DEDUPECTL_* in the environment is the worker's).
previous_kafka_version=3.9.1
"$venv/bin/dedupectl" dev fetch-kafka >/dev/null
"$venv/bin/dedupectl" dev fetch-kafka --kafka-version "$previous_kafka_version" >/dev/null
bash "$root/scripts/fetch-promtool.sh"
export PATH="$venv/bin:$PATH"
