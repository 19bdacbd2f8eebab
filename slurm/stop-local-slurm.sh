#!/usr/bin/env bash
# stop-local-slurm.sh: stop the local Slurm cluster that start-local-slurm.sh started.
#
# Cancels the cluster's jobs (so Slurm itself ends their processes), then stops slurmd,
# slurmctld and munged. Only pids that start-local-slurm.sh recorded (or that the daemons wrote
# into pid files in the state dir) are signalled, and only after checking that the process's
# command line names this state dir; nothing is ever looked up or killed by name. Running it
# when nothing is running is fine. Needs root. See docs/slurm.md.
#
# Options:
#   --purge      also delete the state dir (config, munge key, job state, logs)
#   -h, --help   this text
#
# Environment: LOCAL_SLURM_DIR, the state dir [/var/tmp/gpuguard-slurm], as for the start script.

set -uo pipefail

PROG=stop-local-slurm
log()  { printf '[%s] %s\n' "$PROG" "$*" >&2; }
die()  { printf '[%s] ERROR: %s\n' "$PROG" "$*" >&2; exit 1; }
usage() { sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//' >&2; }

PURGE=0
while [ $# -gt 0 ]; do
    case "$1" in
        --purge) PURGE=1 ;;
        -h|--help) usage; exit 0 ;;
        *) usage; die "unknown argument: $1" ;;
    esac
    shift
done

DIR=${LOCAL_SLURM_DIR:-/var/tmp/gpuguard-slurm}
case "$DIR" in /*) ;; *) die "LOCAL_SLURM_DIR must be an absolute path (got '$DIR')" ;; esac
DIR=${DIR%/}
CONF=$DIR/etc/slurm.conf
RECORD=$DIR/run/started.pids

[ "$(id -u)" -eq 0 ] || die "must run as root; try: sudo bash $0"

if [ ! -d "$DIR" ]; then
    log "nothing to stop: $DIR does not exist"
    exit 0
fi

exec 9>"$DIR.lock"
flock -w 300 9 || die "another start/stop holds $DIR.lock for more than 300 s"

# is $2 a live process of daemon $1 started from our state dir?
is_ours() {
    local name=$1 pid=$2 cmd
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) || return 1
    case "$cmd" in *"$name"*"$DIR/"*) return 0 ;; esac
    return 1
}

# the pids of daemon $1 that are ours and alive: recorded by the start script, or in its pid file
pids_of() {
    local name=$1 p seen=" "
    {
        [ -f "$RECORD" ] && awk -v n="$name" '$1 == n { print $2 }' "$RECORD"
        [ -s "$DIR/run/$name.pid" ] && { tr -dc '0-9' < "$DIR/run/$name.pid"; echo; }
    } 2>/dev/null | while read -r p; do
        [ -n "$p" ] || continue
        case "$seen" in *" $p "*) continue ;; esac
        seen="$seen$p "
        if is_ours "$name" "$p"; then echo "$p"; fi
    done
}

stop_daemon() {
    local name=$1 pid left=0
    for pid in $(pids_of "$name"); do
        stopped=$((stopped + 1))
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 1 100); do
            is_ours "$name" "$pid" || break
            sleep 0.2
        done
        if is_ours "$name" "$pid"; then
            log "$name (pid $pid) still running 20 s after SIGTERM; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null
            sleep 0.5
        fi
        if is_ours "$name" "$pid"; then log "could not stop $name (pid $pid)"; left=1; fi
    done
    return "$left"
}

status=0
stopped=0

# 1. cancel the jobs, so that Slurm ends their processes (SIGTERM, KillWait, SIGKILL)
if [ -n "$(pids_of slurmctld)" ] && [ -n "$(pids_of slurmd)" ] && [ -r "$CONF" ]; then
    export SLURM_CONF=$CONF
    jobs=$(timeout 20 squeue -h -o '%A' 2>/dev/null | sort -u | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
        log "cancelling jobs: $jobs"
        # shellcheck disable=SC2086
        timeout 20 scancel $jobs 2>/dev/null
        killwait=$(sed -n 's/^KillWait=\([0-9]*\).*/\1/p' "$CONF" | head -n1)
        end=$(( $(date +%s) + ${killwait:-30} + 30 ))
        while [ "$(date +%s)" -lt "$end" ]; do
            [ -z "$(timeout 20 squeue -h -o '%A' 2>/dev/null)" ] && break
            # a job that requeues itself on SIGTERM (gpuguard with slurm.requeue_on: [SIGTERM])
            # comes back PENDING: cancel it again, which removes a pending job at once
            pending=$(timeout 20 squeue -h -t PENDING -o '%A' 2>/dev/null | sort -u | tr '\n' ' ')
            # shellcheck disable=SC2086
            [ -n "${pending// /}" ] && timeout 20 scancel $pending 2>/dev/null
            sleep 0.5
        done
        left=$(timeout 20 squeue -h -o '%A %T' 2>/dev/null | tr '\n' ';')
        if [ -n "$left" ]; then log "jobs still not finished: $left"; status=1; fi
    fi
fi

# 2. daemons, compute node first
stop_daemon slurmd || status=1

# job step daemons forked by our slurmd have SLURM_CONF=<our slurm.conf> in their environment;
# they end a moment after their job, so give them a few seconds
find_stepds() {
    local envf p found=""
    for envf in /proc/[0-9]*/environ; do
        p=${envf#/proc/}; p=${p%/environ}
        case "$(cat "/proc/$p/comm" 2>/dev/null)" in slurmstepd) ;; *) continue ;; esac
        if { tr '\0' '\n' < "$envf"; } 2>/dev/null | grep -qxF "SLURM_CONF=$CONF"; then found="$found $p"; fi
    done
    echo "$found"
}
for _ in $(seq 1 30); do
    stray=$(find_stepds)
    [ -n "${stray// /}" ] || break
    sleep 0.5
done
if [ -n "${stray// /}" ]; then
    log "WARNING: job step daemons of this cluster are still running (slurmstepd pids:$stray); not killed"
    status=1
fi

stop_daemon slurmctld || status=1
stop_daemon munged || status=1

# 3. empty cgroup v1 directories our slurmd made in cgroup mode, slurm_<node name> (rmdir fails on any that still
#    holds a process, so nothing in use is touched)
if [ "$status" = 0 ]; then
    node=$(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$CONF" 2>/dev/null | head -n1)
    for c in /sys/fs/cgroup/*/"slurm_${node:-localhost}"; do
        [ -d "$c" ] || continue
        find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
fi

if [ "$status" = 0 ]; then
    : > "$RECORD"
    rm -f "$DIR/run/munged.pid" "$DIR/run/slurmctld.pid" "$DIR/run/slurmd.pid"
    if [ "$PURGE" = 1 ]; then
        rm -rf "$DIR"
        rm -f "$DIR.lock"
        log "stopped; removed $DIR"
    else
        if [ "$stopped" = 0 ]; then log "nothing was running (state kept in $DIR; --purge deletes it)"
        else log "stopped (state kept in $DIR; --purge deletes it)"; fi
    fi
else
    log "some processes are still running (see above); state dir kept"
fi
exit "$status"
