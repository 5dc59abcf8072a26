#!/usr/bin/env bash
# promtool and prometheus (from Debian's `prometheus` package) for the alert rules' and the dashboard's tests,
# unpacked into the cache without installing the package or starting a service. Idempotent; on a machine
# without apt it says so and exits 0 (those tests then skip with that reason).
set -euo pipefail
cache="${DEDUPECTL_CACHE_DIR:-$HOME/.cache/dedupectl}/promtool"
if { command -v promtool >/dev/null || [ -x "$cache/promtool" ]; } \
  && { command -v prometheus >/dev/null || [ -x "$cache/prometheus" ]; }; then
  exit 0
fi
if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
  echo "note: no apt-get/dpkg here: install promtool (Prometheus) to run the alert rules' tests" >&2
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download prometheus >/dev/null 2>&1) || {
  echo "note: apt-get could not download Debian's prometheus package: the alert rules' tests will skip" >&2
  exit 0
}
dpkg -x "$work"/prometheus_*.deb "$work/unpacked"
mkdir -p "$cache"
for tool in promtool prometheus; do
  cp "$work/unpacked/usr/bin/$tool" "$cache/$tool.partial"
  mv "$cache/$tool.partial" "$cache/$tool"
done
