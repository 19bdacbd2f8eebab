#!/usr/bin/env bash
# Compares the classifier's throughput at a base revision with the working
# tree's: ClassifyReader (splitter + classifier) and ClassifierLine (the
# classifier alone) over the benchmark's 16 MiB mixed log, in MB per
# CPU-second, the two builds run in alternating order, ROUNDS rounds.
#
#   bench/classify.sh [BASE_REV]        (default BASE_REV: HEAD)
#   ROUNDS=60 SPLIT=450 bench/classify.sh 646653a
#
# On a shared VM one run lands in one of two modes, seconds apart and
# whatever the build: its vCPU on a core of its own, or sharing one (the
# second mode is about two thirds of the first). A median over all runs
# mixes the two in whatever proportion the host gave; the script prints each
# mode's median (runs above and below SPLIT MB per CPU-second), the median
# over all runs, and the median of the per-round ratios of runs that landed
# in the same mode, which no mode changes.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
base="${1:-HEAD}"
rounds="${ROUNDS:-40}"
split="${SPLIT:-450}"
corpus="${GPUGUARD_CORPUS:-$PWD/../shared/corpus}"
[ -d "$corpus" ] || { echo "classify.sh: no shared corpus at $corpus (set GPUGUARD_CORPUS)" >&2; exit 2; }
out="$PWD/bench/out/classify"
mkdir -p "$out"
rm -rf "$out/base-src"
git worktree add -q --detach "$out/base-src" "$base"
trap 'git worktree remove --force "$out/base-src"' EXIT
(cd "$out/base-src" && go test -c -o "$out/base.test" ./internal/probes/classify)
go test -c -o "$out/now.test" ./internal/probes/classify

run() { # binary benchmark -> MB per CPU-second
  (cd internal/probes/classify && GPUGUARD_CORPUS="$corpus" "$1" -test.run '^$' -test.bench "$2" -test.benchtime 5x) |
    awk '/^Benchmark/ { for (i = 1; i <= NF; i++) if ($i == "MB/cpu-s") print $(i-1) }'
}
: > "$out/runs.txt"
for r in $(seq "$rounds"); do
  for b in 'ClassifyReader$' 'ClassifierLine$'; do
    if [ $((r % 2)) = 0 ]; then x=$(run "$out/base.test" "$b"); y=$(run "$out/now.test" "$b")
    else y=$(run "$out/now.test" "$b"); x=$(run "$out/base.test" "$b"); fi
    [ -n "$x" ] && [ -n "$y" ] || { echo "classify.sh: a run printed no MB/cpu-s" >&2; exit 1; }
    echo "${b%\$} $x $y" >> "$out/runs.txt"
  done
done

echo "base $base vs the working tree, $rounds rounds, MB per CPU-second (runs in $out/runs.txt)"
for b in ClassifyReader ClassifierLine; do
  awk -v b="$b" -v s="$split" '
    function median(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
      return n == 0 ? 0 : (n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2)
    }
    $1 == b {
      n++; x[n] = $2; y[n] = $3
      if ($2 > s) { xu[++nxu] = $2 } else { xl[++nxl] = $2 }
      if ($3 > s) { yu[++nyu] = $3 } else { yl[++nyl] = $3 }
      if (($2 > s) == ($3 > s)) q[++nq] = $3 / $2
    }
    END {
      printf "%s\n", b
      printf "  base: all %.0f, upper mode %.0f (%d runs), lower mode %.0f (%d runs)\n", median(x, n), median(xu, nxu), nxu, median(xl, nxl), nxl
      printf "  now:  all %.0f, upper mode %.0f (%d runs), lower mode %.0f (%d runs)\n", median(y, n), median(yu, nyu), nyu, median(yl, nyl), nyl
      printf "  now/base, rounds in the same mode: %.3f (%d rounds)\n", median(q, nq), nq
    }' "$out/runs.txt"
done
