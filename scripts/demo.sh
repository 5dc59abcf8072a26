#!/usr/bin/env bash
# The main job end to end on a local broker: install, start Kafka, produce events with duplicates,
# run the worker, check the output is exactly once, stop. Extra arguments go to `dedupectl demo`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
exec dedupectl demo "$@"
