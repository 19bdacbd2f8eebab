#!/usr/bin/env bash
# Passthrough benchmark: how fast a very chatty job's output gets through
# `gpuguard run`, against the same job under a plain relay, and how much CPU
# and memory gpuguard uses meanwhile.
#
#   bench/passthrough.sh                        # 200 MiB per run, 5 rounds, pty and pipe
#   MB=400 ROUNDS=7 MODES=pty bench/passthrough.sh
#
# Modes:
#   pty   `gpuguard run --pty always -- chatty`  against  `script -qc chatty /dev/null`
#         (script(1): a plain pty relay)
#   pipe  `gpuguard run --pty never -- chatty`   against  `chatty | cat`
#
# Each round runs bench/chatty (flood mode) under the baseline and under
# gpuguard, in alternating order, both writing to /dev/null. gpuguard also
# writes output.log and scans every line, as in real use, with its memory
# sampler on (host memory only where there is no GPU). MiB/s counts chatty's
# bytes (before the pty's "\r"s) over the wall-clock time of the whole
# command, start-up included. The script prints each run's throughput, the
# median of the per-round ratios gpuguard/baseline (target >= 0.95),
# gpuguard's peak RSS and CPU time as it measures itself (getrusage, in the
# run_end event of events.jsonl; target <= 30 MiB), and the CPU time of the
# whole pipeline (job and relay, from time(1)) under gpuguard over that
# under the baseline: on a busy machine, where the wall-clock ratio mostly
# measures the wait for a core, this is the figure that says what gpuguard
# costs.
#
# Correctness, checked every time (exit status 1 on any mismatch):
#   - before the timed rounds, one run of each side of each mode writes the
#     passed-through stream to a file, which must equal chatty's output byte
#     for byte (under a pty: with "\r\n" for each '\n', what ONLCR makes of
#     it; chatty -onlcr writes exactly that);
#   - after every timed gpuguard run, output.log must equal it too, and
#     gpuguard must exit 0.
# Timings depend on the machine's load: the load average is printed with
# each round; run it on a quiet machine for figures to compare.
set -euo pipefail
cd "$(dirname "$0")/.."

MB=${MB:-200}
ROUNDS=${ROUNDS:-5}
MODES=${MODES:-pty pipe}
out=bench/out/passthrough
rm -rf "$out"
mkdir -p "$out"
go build -o "$out/gpuguard" .
go build -o "$out/chatty" ./bench/chatty
chatty=$out/chatty
bytes=$(( (MB << 20) + 6 )) # chatty's output: MB MiB and "\ndone\n"

fail() { echo "passthrough: FAIL: $*" >&2; exit 1; }
now() { date +%s.%N; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
mibs() { awk -v b="$bytes" -v t0="$1" -v t1="$2" 'BEGIN { printf "%.1f", b / (t1 - t0) / 1048576 }'; }
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# expected MODE: chatty's output as the relay reads it.
expected() {
  if [ "$1" = pty ]; then "$chatty" -mb "$MB" -onlcr; else "$chatty" -mb "$MB"; fi
}

# same MODE FILE WHAT: FILE must hold exactly chatty's output.
same() {
  local n
  n=$(wc -c <"$2")
  if ! expected "$1" | cmp -s - "$2"; then
    fail "$3 differs from chatty's own output ($n bytes; $(expected "$1" | cmp - "$2" 2>&1 | head -1)): bytes were lost, added or reordered"
  fi
}

# baseline MODE DEST TIMES: the plain relay, output to DEST; CPU seconds of
# the relay and the job together to TIMES.
baseline() {
  if [ "$1" = pty ]; then
    /usr/bin/time -f '%U %S' -o "$3" script -qc "$chatty -mb $MB" /dev/null </dev/null >"$2"
  else
    /usr/bin/time -f '%U %S' -o "$3" sh -c '"$1" -mb "$2" | cat' sh "$chatty" "$MB" </dev/null >"$2"
  fi
}

# guarded MODE RUN DEST TIMES: chatty under gpuguard, run directory
# $out/RUN, output to DEST; CPU seconds of gpuguard and the job together to
# TIMES.
guarded() {
  local flag=always
  [ "$1" = pipe ] && flag=never
  local rc=0
  /usr/bin/time -f '%U %S' -o "$4" "$out/gpuguard" run --pty "$flag" --run-dir "$out/$2" -- "$chatty" -mb "$MB" \
    </dev/null >"$3" 2>"$out/$2.stderr" || rc=$?
  [ "$rc" = 0 ] || fail "gpuguard exited $rc in $out/$2 (see $out/$2.stderr)"
}

# field RUN TYPE KEY: a number from the run's events.jsonl.
field() {
  grep -h "\"type\":\"$2\"" "$out/$1/events.jsonl" | tail -1 | sed -n "s/.*\"$3\":\([0-9.e+-]*\).*/\1/p"
}

echo "chatty: $MB MiB of log lines and progress bars ($bytes bytes) per run, $ROUNDS rounds, modes: $MODES"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr), $(go version | cut -d' ' -f3)"

for mode in $MODES; do
  case $mode in
    pty) base=script ;;
    pipe) base=cat ;;
    *) fail "unknown mode $mode (pty or pipe)" ;;
  esac

  # Untimed: the passed-through streams, byte for byte.
  baseline "$mode" "$out/$mode-check.$base" /dev/null
  same "$mode" "$out/$mode-check.$base" "$base's passed-through stream"
  guarded "$mode" "$mode-check" "$out/$mode-check.stdout" /dev/null
  same "$mode" "$out/$mode-check.stdout" "gpuguard's passed-through stream (--pty $mode)"
  same "$mode" "$out/$mode-check/output.log" "gpuguard's output.log (--pty $mode)"
  rm -f "$out/$mode-check.$base" "$out/$mode-check.stdout" "$out/$mode-check/output.log"
  echo "$mode: passed-through stream and output.log equal chatty's output, byte for byte"

  base_mbs=() guard_mbs=() ratios=() rss=() cpu=() cpuratios=()
  for i in $(seq 1 "$ROUNDS"); do
    run=$mode-$i
    l=$(load)
    for side in $(if (( i % 2 )); then echo base guard; else echo guard base; fi); do
      t0=$(now)
      if [ "$side" = base ]; then baseline "$mode" /dev/null "$out/$run.base.time"; else guarded "$mode" "$run" /dev/null "$out/$run.guard.time"; fi
      t1=$(now)
      if [ "$side" = base ]; then b=$(mibs "$t0" "$t1"); else g=$(mibs "$t0" "$t1"); fi
    done
    same "$mode" "$out/$run/output.log" "gpuguard's output.log ($run)"
    rm -f "$out/$run/output.log"
    r=$(awk -v g="$g" -v b="$b" 'BEGIN { printf "%.3f", g / b }')
    kb=$(field "$run" run_end peak_rss_kb)
    c=$(awk -v u="$(field "$run" run_end cpu_user_s)" -v s="$(field "$run" run_end cpu_sys_s)" 'BEGIN { printf "%.2f", u + s }')
    dropped=$(field "$run" attempt_end dropped_scan_bytes)
    # CPU of the whole pipeline (relay + job), which the machine's load
    # does not change much: gpuguard's over the baseline's.
    cr=$(cat "$out/$run.guard.time" "$out/$run.base.time" | awk 'NR == 1 { g = $1 + $2 } NR == 2 { b = $1 + $2 } END { printf "%.2f", g / b }')
    printf '%s round %d: %-6s %7s MiB/s  gpuguard %7s MiB/s  ratio %s  gpuguard peak RSS %5.1f MiB, CPU %5s s (whole pipeline: %sx %s'"'"'s), scan dropped %s B  (load %s)\n' \
      "$mode" "$i" "$base" "$b" "$g" "$r" "$(awk -v k="$kb" 'BEGIN { print k / 1024 }')" "$c" "$cr" "$base" "${dropped:-?}" "$l"
    base_mbs+=("$b") guard_mbs+=("$g") ratios+=("$r") rss+=("$kb") cpu+=("$c") cpuratios+=("$cr")
  done
  maxrss=$(printf '%s\n' "${rss[@]}" | sort -n | tail -1)
  echo "$mode median: $base $(median "${base_mbs[@]}") MiB/s, gpuguard $(median "${guard_mbs[@]}") MiB/s," \
    "ratio $(median "${ratios[@]}") (target >= 0.95); gpuguard peak RSS $(awk -v k="$maxrss" 'BEGIN { printf "%.1f", k / 1024 }') MiB" \
    "(largest of $ROUNDS runs; target <= 30 MiB), CPU $(median "${cpu[@]}") s per run (median), whole pipeline $(median "${cpuratios[@]}")x $base's CPU (median)  (load $(load))"
done
