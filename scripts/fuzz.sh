#!/usr/bin/env bash
# Runs every fuzz target in the module for a bounded time, one target per
# `go test -fuzz` invocation (Go fuzzes one target at a time), and exits
# non-zero as soon as one finds a failure.
#
#   scripts/fuzz.sh                  # each target FUZZTIME (default 10s), all within FUZZ_BUDGET
#   FUZZTIME=1m scripts/fuzz.sh      # longer, by hand
#   scripts/fuzz.sh FuzzClassifier   # only the targets named
#
# Targets are found, not listed: every `func FuzzX(f *testing.F)` in a
# _test.go file. FUZZ_BUDGET (seconds, default 120) bounds the whole script:
# each target gets at most 10s, less when what is left of the budget, shared
# among the targets left, is smaller (never less than 2s). A failure leaves the failing input under
# the package's testdata/fuzz/FuzzX/ (go test writes it there); commit it
# with the fix so that every `go test` run replays it.
set -euo pipefail
cd "$(dirname "$0")/.."

export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"  # go-nvml's headers warn on every cgo build

budget=${FUZZ_BUDGET:-120}
per=${FUZZTIME:-}

# "dir name" per target, sorted for a stable order.
mapfile -t targets < <(
  grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . | grep -v '/testdata/' |
    while IFS=: read -r file _ text; do
      name=${text#func }
      name=${name%%(*}
      dir=$(dirname "${file#./}")
      echo "$dir $name"
    done | sort -u
)
if [ "$#" -gt 0 ]; then
  keep=()
  for t in "${targets[@]}"; do
    for want in "$@"; do [ "${t#* }" = "$want" ] && keep+=("$t"); done
  done
  targets=("${keep[@]}")
fi
if [ "${#targets[@]}" -eq 0 ]; then
  echo "fuzz.sh: no fuzz targets found${*:+ named $*}" >&2
  exit 1
fi

echo "fuzz.sh: ${#targets[@]} targets, ${per:-up to 10s} each, ${budget}s budget"
start=$SECONDS
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=()
left=${#targets[@]}
for t in "${targets[@]}"; do
  dir=${t% *} name=${t#* }
  if [ -z "${FUZZTIME:-}" ]; then
    # Share what is left of the budget among the targets left, keeping ~5 s
    # a target for compiling its instrumented test binary (much more on a
    # cold build cache: the first run of the day can overrun the budget).
    secs=$(( (budget - (SECONDS - start)) / left - 5 ))
    [ "$secs" -gt 10 ] && secs=10
    [ "$secs" -lt 2 ] && secs=2
    per="${secs}s"
  fi
  left=$(( left - 1 ))
  echo "== $name ($dir, $per)"
  corpus="$dir/testdata/fuzz/$name"
  before=$(ls "$corpus" 2>/dev/null | sort || true)
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$per" "./$dir" 2>&1 | tee "$log"; then
    new=$(comm -13 <(echo "$before") <(ls "$corpus" 2>/dev/null | sort || true) | sed "s|^|$corpus/|")
    if [ -z "$new" ] && grep -q 'context deadline exceeded' "$log"; then
      # Go's fuzz coordinator can report its own -fuzztime deadline as a
      # failure (go.dev/issue/75804, fixed in Go 1.27): no input failed.
      echo "fuzz.sh: $name: 'context deadline exceeded' with no failing input: Go's fuzzing race at the end of -fuzztime (go.dev/issue/75804), not a failure" >&2
      continue
    fi
    failed+=("$name in ./$dir")
    [ -n "$new" ] && echo "fuzz.sh: failing input kept in: $new (replay: go test -run '$name' ./$dir)" >&2
    break
  fi
done
echo "fuzz.sh: $(( SECONDS - start ))s in all"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: all targets passed"
