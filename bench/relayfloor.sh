#!/usr/bin/env bash
# Relay floor: where the passthrough benchmark's pty gap comes from. One
# chatty job (bench/chatty, MB MiB of log lines and tqdm bars) is relayed
# from a pty, in each round, by:
#
#   script     `script -qc CHATTY FILE`: util-linux, the baseline of
#              bench/passthrough.sh (its typescript to a file, as `script -qc`
#              keeps one by default)
#   c          bench/ptyrelay/c/relay.c: a poll(2)/read(2) loop in C that
#              only reads
#   c-tee      the same, writing every read to stdout and a file (what script
#              does)
#   go         bench/ptyrelay: creack/pty and io.Copy, only reading
#   go-tee     the same, writing every read to stdout and a file
#   gpuguard   `gpuguard run --pty always`: stdout, output.log, the scanner,
#              the memory sampler
#
#   bench/relayfloor.sh                  # MB=200 ROUNDS=7
#   MB=400 ROUNDS=9 bench/relayfloor.sh
#
# The relays run in a rotating order each round, stdout to /dev/null. The
# script prints, per relay, the median wall-clock time of the whole command,
# its MiB/s and its ratio to script's median. The C relay needs a C compiler
# (cc) and is left out without one. Every relayed stream that is kept (the
# -tee files, script's typescript, gpuguard's output.log) is checked against
# chatty's own output after the first round: exit status 1 on a difference.
set -euo pipefail
cd "$(dirname "$0")/.."

MB=${MB:-200}
ROUNDS=${ROUNDS:-7}
out=bench/out/relayfloor
rm -rf "$out"
mkdir -p "$out"
go build -o "$out/gpuguard" .
go build -o "$out/chatty" ./bench/chatty
go build -o "$out/ptyrelay" ./bench/ptyrelay
chatty=$out/chatty
relays="script go go-tee gpuguard"
if command -v cc >/dev/null && cc -O2 -o "$out/relay-c" bench/ptyrelay/c/relay.c -lutil 2>"$out/cc.err"; then
  relays="script c c-tee go go-tee gpuguard"
else
  echo "relayfloor: no C compiler (cc) or the C relay did not build ($out/cc.err): leaving it out"
fi
bytes=$(( (MB << 20) + 6 ))

fail() { echo "relayfloor: FAIL: $*" >&2; exit 1; }

# relay NAME: run chatty under relay NAME once; its log (if any) in $out/NAME.log.
relay() {
  local job=("$chatty" -mb "$MB")
  case $1 in
    script) script -qc "${job[*]}" "$out/script.log" ;;
    c) "$out/relay-c" "${job[@]}" ;;
    c-tee) "$out/relay-c" -tee "$out/c-tee.log" "${job[@]}" ;;
    go) "$out/ptyrelay" "${job[@]}" ;;
    go-tee) "$out/ptyrelay" -tee "$out/go-tee.log" "${job[@]}" ;;
    gpuguard)
      rm -rf "$out/run"
      "$out/gpuguard" run --pty always --run-dir "$out/run" -- "${job[@]}" 2>"$out/gpuguard.stderr" &&
        mv "$out/run/output.log" "$out/gpuguard.log"
      ;;
  esac
} </dev/null >/dev/null 2>>"$out/relays.stderr"

check() {
  local f
  "$chatty" -mb "$MB" -onlcr >"$out/expected"
  # script's typescript holds a line before the output and two after it.
  if [ -f "$out/script.log" ]; then
    sed 1d "$out/script.log" | head -n -2 >"$out/script.body" && mv "$out/script.body" "$out/script.log"
  fi
  for f in "$out"/*.log; do
    cmp -s "$out/expected" "$f" || fail "$f differs from chatty's output: the relay lost, added or reordered bytes"
  done
  rm -f "$out/expected" "$out"/*.log
}

echo "chatty: $MB MiB per run ($bytes bytes), $ROUNDS rounds; relays: $relays"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr), $(go version | cut -d' ' -f3), load $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A times
read -ra order <<<"$relays"
for i in $(seq 1 "$ROUNDS"); do
  # Rotate the order, so that no relay always runs right after another.
  k=$(( (i - 1) % ${#order[@]} ))
  round=("${order[@]:k}" "${order[@]:0:k}")
  for r in "${round[@]}"; do
    t0=$(date +%s.%N)
    relay "$r" || fail "$r exited non-zero (see $out/relays.stderr, $out/gpuguard.stderr)"
    t1=$(date +%s.%N)
    times[$r]+="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') "
  done
  [ "$i" = 1 ] && check
  rm -f "$out"/*.log
done

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
# shellcheck disable=SC2086
base=$(median ${times[script]})
printf '%-9s %9s %8s %7s   %s\n' relay "median s" "MiB/s" ratio "all runs (s)"
for r in $relays; do
  # shellcheck disable=SC2086
  m=$(median ${times[$r]})
  printf '%-9s %9s %8s %7s   %s\n' "$r" "$m" "$(awk -v b="$bytes" -v t="$m" 'BEGIN { printf "%.1f", b / t / 1048576 }')" \
    "$(awk -v m="$m" -v s="$base" 'BEGIN { printf "%.3f", s / m }')" "${times[$r]}"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
