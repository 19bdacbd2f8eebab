#!/usr/bin/env bash
# The torch probe's step-time overhead (gpuguard run --probe torch): a small
# CPU model (bench/torchprobe/steps.py) trained with and without the probe,
# alternating, ROUNDS times each; prints each run and the median of the
# rounds' medians. The probe is loaded as gpuguard loads it (its directory
# first on PYTHONPATH, GPUGUARD_PROBE_DIR set), from the source files.
#
#   bench/torchprobe/overhead.sh
#   ROUNDS=7 LAYERS=32 WIDTH=64 bench/torchprobe/overhead.sh   # many small modules
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-/usr/bin/python3}
ROUNDS=${ROUNDS:-5}
export OMP_NUM_THREADS=1 LAYERS=${LAYERS:-8} WIDTH=${WIDTH:-64} BATCH=${BATCH:-32} STEPS=${STEPS:-2000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
site=$PWD/internal/probes/torchprobe/py
off=() on=()
for r in $(seq "$ROUNDS"); do
	a=$(env -u PYTHONPATH -u GPUGUARD_PROBE_DIR "$PY" bench/torchprobe/steps.py)
	mkdir -p "$out/$r"
	b=$(PYTHONPATH=$site GPUGUARD_PROBE_DIR=$out/$r "$PY" bench/torchprobe/steps.py)
	ls "$out/$r"/probe-*.jsonl >/dev/null  # the probe was on
	echo "round $r  without: $a"
	echo "round $r  with:    $b"
	off+=("$(echo "$a" | awk '{print $2}')") on+=("$(echo "$b" | awk '{print $2}')")
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
m0=$(med "${off[@]}") m1=$(med "${on[@]}")
awk -v a="$m0" -v b="$m1" -v l="$LAYERS" -v w="$WIDTH" -v bs="$BATCH" 'BEGIN {
	printf "model: %d blocks of Linear(%d)+ReLU, batch %d, 1 thread\n", l, w, bs
	printf "median step: %.1f us without the probe, %.1f us with it: %+.1f us (%+.2f%%)\n", a, b, b-a, (b-a)/a*100 }'
