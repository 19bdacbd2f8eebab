#!/usr/bin/env bash
# Footprint benchmark: gpuguard's own CPU time and memory while it supervises
# a job for a while with its memory sampler on.
#
#   bench/footprint.sh                 # 60 s per job
#   SECS=600 PTY=always bench/footprint.sh
#   BUSY_PROCS=500 bench/footprint.sh  # with 500 other processes on the machine
#
# Jobs, each run under `gpuguard run --pty $PTY` (default never: pipes, as in
# a batch job whose output goes to a file):
#   quiet   sleep $SECS                                  (no output at all)
#   chatty  bench/chatty -for ${SECS}s -bar-hz 10 -line-hz 1
#           (a tqdm bar redrawn 10 times a second and a log line a second)
# each with the default sampling (1 Hz; 20 Hz for 5 s after a phase change)
# and with a policy that samples at 10 Hz throughout.
#
# gpuguard's figures are its own (getrusage(RUSAGE_SELF) in the run_end
# event of events.jsonl: the job's CPU and memory are not counted). CPU is
# given in seconds and as a share of one core over the run's wall time.
# /usr/bin/time's maximum RSS is printed beside it as a cross-check: it is
# the largest of gpuguard and the job's processes. Without an NVIDIA driver
# the sampler reads host memory only (/proc and the cgroup); the script says
# which it was. The number of processes on the machine is printed too:
# gpuguard looks through /proc for processes that left the job's tree, so
# its cost grows with it (BUSY_PROCS starts that many idle processes for the
# benchmark's duration to show how much). Exit status 1 if a run fails or
# leaves no run_end event.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${SECS:-60}
PTY=${PTY:-never}
BUSY_PROCS=${BUSY_PROCS:-0}
out=bench/out/footprint
rm -rf "$out"
mkdir -p "$out"
go build -o "$out/gpuguard" .
go build -o "$out/chatty" ./bench/chatty
printf 'version: 1\nsampling: {base_hz: 10, val_hz: 20, fast_window: 5s}\n' >"$out/10hz.yaml"

fail() { echo "footprint: FAIL: $*" >&2; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
field() {
  grep -h "\"type\":\"$2\"" "$out/$1/events.jsonl" | tail -1 | sed -n "s/.*\"$3\":\([0-9.e+-]*\).*/\1/p"
}

busy=()
stop_busy() { ((${#busy[@]})) && kill "${busy[@]}" 2>/dev/null; wait "${busy[@]}" 2>/dev/null || true; }
trap stop_busy EXIT
for _ in $(seq 1 "$BUSY_PROCS"); do
  sleep 100000 &
  busy+=($!)
done

echo "machine: $(nproc) cores, $(ls /proc | grep -c '^[0-9]') processes running, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr), $(go version | cut -d' ' -f3); --pty $PTY, $SECS s per job"

for job in quiet chatty; do
  for sampling in default 10hz; do
    run=$job-$sampling
    argv=(sleep "$SECS")
    [ "$job" = chatty ] && argv=("$out/chatty" -for "${SECS}s" -bar-hz 10 -line-hz 1)
    pol=()
    [ "$sampling" = 10hz ] && pol=(--policy "$out/10hz.yaml")
    l0=$(load)
    rc=0
    /usr/bin/time -f '%e %M' -o "$out/$run.time" \
      "$out/gpuguard" run --pty "$PTY" --no-env "${pol[@]}" --run-dir "$out/$run" -- "${argv[@]}" \
      </dev/null >"$out/$run.stdout" 2>"$out/$run.stderr" || rc=$?
    [ "$rc" = 0 ] || fail "gpuguard exited $rc for $run (see $out/$run.stderr)"
    [ -n "$(field "$run" run_end peak_rss_kb)" ] || fail "no run_end event in $out/$run/events.jsonl"
    gpu=host-only
    grep -q 'GPU memory not sampled' "$out/$run/gpuguard.log" || gpu=GPU+host
    samples=$(awk -F, 'NR > 1 && $4 == "host"' "$out/$run/timeline.csv" | wc -l)
    read -r wall tmax <"$out/$run.time"
    awk -v run="$run" -v u="$(field "$run" run_end cpu_user_s)" -v s="$(field "$run" run_end cpu_sys_s)" \
      -v rss="$(field "$run" run_end peak_rss_kb)" -v wall="$wall" -v tmax="$tmax" -v n="$samples" \
      -v gpu="$gpu" -v l0="$l0" -v l1="$(load)" 'BEGIN {
        printf "%-15s CPU %.2f s (user %.2f, sys %.2f) = %.2f%% of a core over %.1f s; peak RSS %.1f MiB (time(1): %.1f MiB); %d samples (%s); load %s -> %s\n",
          run, u + s, u, s, 100 * (u + s) / wall, wall, rss / 1024, tmax / 1024, n, gpu, l0, l1 }'
  done
done
