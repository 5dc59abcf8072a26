#!/usr/bin/env bash
# Every benchmark in benchmarks/, one after another (each prints its figures and writes results JSON).
# Run on a quiet machine. Extra arguments: benchmark names to run (e.g. scripts/bench.sh worker).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for file in benchmarks/bench_*.py; do names+=("$(basename "$file" .py | sed 's/^bench_//')"); done
fi
for name in "${names[@]}"; do
  echo "== $name"
  python "benchmarks/bench_$name.py"
done
