#!/usr/bin/env bash
# memlimit.sh: run a command under a memory limit, so that it runs out of
# memory for real. Used by the end-to-end tests (docs/e2e.md); usable by hand.
#
#   scripts/memlimit.sh --as BYTES -- COMMAND [ARGS...]
#       Address-space limit (RLIMIT_AS, as `ulimit -v`), then exec COMMAND:
#       COMMAND keeps this process's pid, and its exit status and signals are
#       its own. Allocations past the limit fail (malloc returns NULL, so
#       PyTorch's CPU allocator raises "DefaultCPUAllocator: can't allocate
#       memory"). RLIMIT_AS counts every mapping: shared libraries, thread
#       stacks and malloc arenas, not only the data; set BYTES relative to the
#       command's own baseline.
#
#   scripts/memlimit.sh --cgroup BYTES [--name NAME] -- COMMAND [ARGS...]
#       Memory cgroup with memory.limit_in_bytes (cgroup v1) or memory.max
#       (cgroup v2) of BYTES, created as gpuguard-e2e-NAME (default: this
#       script's pid) under this process's own memory cgroup. COMMAND and all
#       its descendants run in it; when the cgroup runs out of memory the
#       kernel's OOM killer kills one of them. Needs root (or a delegated
#       cgroup). The script stays as COMMAND's parent to clean up: it forwards
#       SIGTERM, SIGINT and SIGHUP to COMMAND, and after COMMAND ends it stops
#       anything of COMMAND's still in the cgroup (SIGTERM, then SIGKILL after
#       5 s), removes the cgroup, prints one line to stderr
#           memlimit: cgroup gpuguard-e2e-NAME: limit L MiB, peak P MiB, oom_kill K
#       and ends the way COMMAND ended: with its exit code, or by the same
#       signal.
#
# Exit status of the script itself: 64 for bad usage, 69 when no memory
# cgroup can be created here (not root, no memory controller), 71 when the
# limit cannot be set or the script cannot join the cgroup.
set -uo pipefail

usage() {
  echo "usage: memlimit.sh --as BYTES -- COMMAND [ARGS...]" >&2
  echo "       memlimit.sh --cgroup BYTES [--name NAME] -- COMMAND [ARGS...]" >&2
  exit 64
}

mode= bytes= name=$$
while [ $# -gt 0 ]; do
  case $1 in
    --as|--cgroup) mode=${1#--}; bytes=${2:-}; shift 2 || usage ;;
    --name) name=${2:-}; shift 2 || usage ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
[ -n "$mode" ] && [ $# -gt 0 ] || usage
case $bytes in ''|*[!0-9]*) echo "memlimit.sh: BYTES must be a whole number of bytes, got '$bytes'" >&2; exit 64 ;; esac
case $name in ''|*[!A-Za-z0-9_.-]*) echo "memlimit.sh: --name takes letters, digits, '_', '.' and '-', got '$name'" >&2; exit 64 ;; esac

if [ "$mode" = as ]; then
  ulimit -v $((bytes / 1024)) || { echo "memlimit.sh: cannot set the address-space limit to $bytes bytes" >&2; exit 71; }
  exec "$@"
fi

# ---- cgroup mode
root=/sys/fs/cgroup
if [ -f "$root/memory/memory.limit_in_bytes" ]; then
  v=1; base=$root/memory
  own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3; exit}' /proc/self/cgroup)
  limit_file=memory.limit_in_bytes peak_file=memory.max_usage_in_bytes
elif grep -qw memory "$root/cgroup.controllers" 2>/dev/null; then
  v=2; base=$root
  own=$(awk -F: '$1 == "0" {print $3; exit}' /proc/self/cgroup)
  limit_file=memory.max peak_file=memory.peak
else
  echo "memlimit.sh: no memory cgroup controller under $root (need cgroup v1 'memory' or v2 with memory enabled)" >&2
  exit 69
fi
parent=$base${own%/}
cg=$parent/gpuguard-e2e-$name
if ! mkdir "$cg" 2>/dev/null; then
  # This process's own cgroup may not allow children (v2 "no internal
  # processes"); fall back to the hierarchy's root.
  parent=$base cg=$base/gpuguard-e2e-$name
  if ! mkdir "$cg" 2>/dev/null; then
    echo "memlimit.sh: cannot create memory cgroup $cg (are you root? does it exist already?)" >&2
    exit 69
  fi
fi
origin=$base${own%/}

oom_kills() {
  if [ $v = 1 ]; then awk '$1 == "oom_kill" {print $2}' "$cg/memory.oom_control" 2>/dev/null
  else awk '$1 == "oom_kill" {print $2}' "$cg/memory.events" 2>/dev/null; fi
}

remove_cgroup() {
  # Leave the cgroup ourselves, stop what is left of the command, remove it.
  echo $$ > "$origin/cgroup.procs" 2>/dev/null || echo $$ > "$base/cgroup.procs" 2>/dev/null
  local left i
  left=$(cat "$cg/cgroup.procs" 2>/dev/null)
  if [ -n "$left" ]; then
    kill -TERM $left 2>/dev/null
    for i in $(seq 50); do
      [ -z "$(cat "$cg/cgroup.procs" 2>/dev/null)" ] && break
      sleep 0.1
    done
    left=$(cat "$cg/cgroup.procs" 2>/dev/null)
    [ -n "$left" ] && kill -KILL $left 2>/dev/null
  fi
  for i in $(seq 50); do
    rmdir "$cg" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "memlimit.sh: could not remove cgroup $cg; remove it with: rmdir $cg" >&2
}

if ! echo "$bytes" > "$cg/$limit_file" 2>/dev/null; then
  echo "memlimit.sh: cannot set $cg/$limit_file to $bytes" >&2
  rmdir "$cg"; exit 71
fi
[ $v = 1 ] && echo "$bytes" > "$cg/memory.memsw.limit_in_bytes" 2>/dev/null  # no swap escape, where swap accounting exists
if ! echo $$ > "$cg/cgroup.procs" 2>/dev/null; then
  echo "memlimit.sh: cannot move into cgroup $cg" >&2
  rmdir "$cg"; exit 71
fi

"$@" &
child=$!
for sig in TERM INT HUP; do
  trap "kill -$sig $child 2>/dev/null" $sig
done
while :; do
  wait $child; status=$?
  # wait returns early (above 128) when a trapped signal arrives; the child
  # is still running then, so wait again.
  kill -0 $child 2>/dev/null || break
done
trap - TERM INT HUP

kills=$(oom_kills)
peak=$(cat "$cg/$peak_file" 2>/dev/null || echo 0)
remove_cgroup
echo "memlimit: cgroup gpuguard-e2e-$name: limit $((bytes >> 20)) MiB, peak $((peak >> 20)) MiB, oom_kill ${kills:-?}" >&2

case $status in
  129|130|131|134|137|139|143)
    # The command died of signal status-128 (bash reports it so; an exit code
    # above 128 looks the same, and training scripts do not use those): die
    # of it too, so that our parent sees what the command's parent saw.
    kill -$((status - 128)) $$ ;;
esac
exit $status
