#!/usr/bin/env bash
# Runs a command beside N CPU-bound processes (default 2), as a shared CI
# machine is loaded, and stops them afterwards, whatever the command does:
#
#   scripts/hogs.sh go test -count=20 ./internal/supervisor
#   HOGS=4 scripts/hogs.sh bash scripts/test.sh
#
# Tests must pass like this: one that waits for a race to go its way fails
# here first.
set -euo pipefail
n=${HOGS:-2}
pids=()
cleanup() { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq "$n"); do
  ( while :; do :; done ) &
  pids+=($!)
done
"$@"
