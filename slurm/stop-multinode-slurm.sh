#!/usr/bin/env bash
# stop-multinode-slurm.sh: stop the multi-node Slurm cluster that start-multinode-slurm.sh started,
# and take away what it made on the host.
#
# Cancels the cluster's jobs (so Slurm itself ends their processes), names any process still on a
# node but the node's init and slurmd (and exits 1), stops every node (SIGTERM to its init, pid 1
# of the node's PID namespace, which stops its slurmd and exits; the kernel then ends whatever was
# left on the node), slurmctld and munged (only pids the start script recorded or wrote into pid
# files in the state dir, and only when the process's command line names the state dir), ends what
# might still run inside the cluster's network namespaces, then removes the veth pairs, the bridge, the namespaces, their
# /etc/netns entries and the empty cgroup directories of the nodes. What to remove is read from
# <state dir>/run/created, which the start script writes before it makes each thing, so a start
# that crashed half-way is cleaned up too. Running it when nothing runs is fine. Needs root.
#
# Options:
#   --purge      also delete the state dir (config, munge key, job state, logs)
#   -h, --help   this text
#
# Environment: MN_SLURM_DIR, the state dir [/var/tmp/gpuguard-mn-slurm], as for the start script.

set -uo pipefail

PROG=stop-multinode-slurm
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

DIR=${MN_SLURM_DIR:-/var/tmp/gpuguard-mn-slurm}
case "$DIR" in /*) ;; *) die "MN_SLURM_DIR must be an absolute path (got '$DIR')" ;; esac
DIR=${DIR%/}
CONF=$DIR/etc/slurm.conf
RECORD=$DIR/run/started.pids
CREATED=$DIR/run/created

[ "$(id -u)" -eq 0 ] || die "must run as root; try: sudo bash $0"
if [ ! -d "$DIR" ]; then
    log "nothing to stop: $DIR does not exist"
    exit 0
fi
exec 9>"$DIR.lock"
flock -w 300 9 || die "another start/stop holds $DIR.lock for more than 300 s"
T0=$(date +%s.%N)

running() {
    local st
    st=$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$1/status" 2>/dev/null)
    [ -n "$st" ] && [ "$st" != Z ]
}

is_ours() {   # name pid: a live process of daemon NAME started from our state dir
    local name=$1 pid=$2 cmd
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    running "$pid" || return 1
    cmd=$(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline") || return 1
    case "$cmd" in *"$name"*"$DIR/"*) return 0 ;; esac
    return 1
}

pids_of() {   # name: live pids of our daemon NAME, from the record and the pid files
    local name=$1 p f seen=" "
    {
        [ -f "$RECORD" ] && awk -v n="$name" '$1 == n { print $2 }' "$RECORD"
        for f in "$DIR/run/$name.pid" "$DIR/run/$name"-*.pid; do
            [ -s "$f" ] && { tr -dc '0-9' < "$f"; echo; }
        done
    } 2>/dev/null | while read -r p; do
        [ -n "$p" ] || continue
        case "$seen" in *" $p "*) continue ;; esac
        seen="$seen$p "
        if is_ours "$name" "$p"; then echo "$p"; fi
    done
}

stopped=0
stop_daemon() {
    local name=$1 pid left=0 pids
    pids=$(pids_of "$name")
    for pid in $pids; do
        stopped=$((stopped + 1))
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null
    done
    for pid in $pids; do
        for _ in $(seq 1 200); do is_ours "$name" "$pid" || break; sleep 0.1; done
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

# 1. cancel the jobs, so that Slurm ends their processes (SIGTERM, KillWait, SIGKILL)
if [ -n "$(pids_of slurmctld)" ] && [ -n "$(pids_of node-init)" ] && [ -r "$CONF" ]; then
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
            # a job that requeued itself on the SIGTERM comes back PENDING: cancel it again
            pending=$(timeout 20 squeue -h -t PENDING -o '%A' 2>/dev/null | sort -u | tr '\n' ' ')
            # shellcheck disable=SC2086
            [ -n "${pending// /}" ] && timeout 20 scancel $pending 2>/dev/null
            sleep 0.3
        done
        left=$(timeout 20 squeue -h -o '%A %T' 2>/dev/null | tr '\n' ';')
        if [ -n "$left" ]; then log "jobs still not finished: $left"; status=1; fi
    fi
fi

# 2. the nodes, then slurmctld and munged
netns_list=$(awk '$1 == "netns" { print $2 }' "$CREATED" 2>/dev/null | sort -u)
ns_pids() {   # every process inside the cluster's network namespaces
    local ns
    for ns in $netns_list; do
        [ -e "/run/netns/$ns" ] && ip netns pids "$ns" 2>/dev/null
    done | sort -un
}
describe() {
    local p
    for p in "$@"; do printf '%s(%s) ' "$p" "$(tr '\0' ' ' 2>/dev/null < "/proc/$p/cmdline" | cut -c1-80)"; done
}
live() { local p; for p in "$@"; do running "$p" && echo "$p"; done; }
inits=" $(pids_of node-init | tr '\n' ' ') "
ppid_of() { awk '/^PPid:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
not_daemons() {   # the processes on the nodes but their inits, the unshare above each and its slurmd
    local p pp keep=" " i
    for i in $inits; do keep="$keep$i $(ppid_of "$i") "; done
    for p in $(live $(ns_pids)); do
        case "$keep" in *" $p "*) continue ;; esac
        pp=$(ppid_of "$p")
        if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmd ]; then
            case "$inits" in *" $pp "*) continue ;; esac
        fi
        echo "$p"
    done
}
if [ -n "${inits// /}" ]; then
    # job step daemons end a moment after their job
    for _ in $(seq 1 50); do
        busy=$(not_daemons)
        [ -n "$busy" ] || break
        sleep 0.1
    done
    if [ -n "$busy" ]; then
        log "WARNING: processes still running on the cluster's nodes after its jobs ended; stopping the nodes ends them: $(describe $busy)"
        status=1
    fi
fi
stop_daemon node-init || status=1

# a node whose init was never recorded (a start that crashed) may have left processes
for _ in $(seq 1 20); do
    stray=$(live $(ns_pids))
    [ -n "$stray" ] || break
    sleep 0.1
done
if [ -n "$stray" ]; then
    # nothing but this cluster's daemons and jobs can be in its namespaces
    log "WARNING: processes still running in the cluster's namespaces after its nodes stopped; ending them: $(describe $stray)"
    status=1
    # shellcheck disable=SC2086
    kill -TERM $stray 2>/dev/null
    for _ in $(seq 1 50); do [ -n "$(live $stray)" ] || break; sleep 0.1; done
    stray=$(live $stray)
    # shellcheck disable=SC2086
    [ -z "$stray" ] || { log "sending SIGKILL to: $(describe $stray)"; kill -KILL $stray 2>/dev/null; sleep 0.5; }
fi

stop_daemon slurmctld || status=1
stop_daemon munged || status=1

# 3. what the start script made on the host, newest first: veths, bridge, namespaces, /etc/netns
if [ -s "$CREATED" ]; then
    tac "$CREATED" | while read -r kind name; do
        case "$kind" in
            link)
                if ip link show "$name" >/dev/null 2>&1; then
                    ip link del "$name" 2>/dev/null || { log "could not delete link $name"; }
                fi ;;
            netns)
                if [ -e "/run/netns/$name" ]; then
                    ip netns del "$name" 2>/dev/null || log "could not delete network namespace $name"
                fi ;;
            dir)
                case "$name" in
                    /etc/netns/?*) rm -rf -- "$name" ;;
                    /etc/netns) rmdir -- "$name" 2>/dev/null ;;   # only when no one else's entries are left
                esac
                # another cluster may have made /etc/netns while we put our entries in it, and
                # could not remove it while they were there: an empty one goes
                case "$name" in /etc/netns/?*) rmdir /etc/netns 2>/dev/null ;; esac ;;
        esac
    done
    left=""
    while read -r kind name; do
        case "$kind" in
            link) ip link show "$name" >/dev/null 2>&1 && left="$left link:$name" ;;
            netns) [ -e "/run/netns/$name" ] && left="$left netns:$name" ;;
            dir) case "$name" in /etc/netns/?*) [ -e "$name" ] && left="$left $name" ;; esac ;;
        esac
    done < "$CREATED"
    if [ -n "$left" ]; then log "could not remove:$left"; status=1; else : > "$CREATED"; fi
fi

# 4. empty cgroup v1 directories the slurmds made in cgroup mode, slurm_<node> (rmdir fails on
#    any that still holds a process)
for node in $(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$CONF" 2>/dev/null); do
    for c in /sys/fs/cgroup/*/"slurm_$node"; do
        [ -d "$c" ] || continue
        find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
done

took=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [ "$status" = 0 ]; then
    : > "$RECORD"
    rm -f "$DIR"/run/*.pid
    if [ "$PURGE" = 1 ]; then
        rm -rf "$DIR"
        rm -f "$DIR.lock"
        log "stopped in $took s; removed $DIR"
    elif [ "$stopped" = 0 ]; then log "nothing was running (state kept in $DIR; --purge deletes it)"
    else log "stopped in $took s (state kept in $DIR; --purge deletes it)"
    fi
else
    if [ "$PURGE" = 1 ] && [ -z "$(ns_pids)" ] && [ -z "$(pids_of slurmctld)$(pids_of munged)$(pids_of node-init)" ]; then
        rm -rf "$DIR"
        rm -f "$DIR.lock"
        log "cleaned up in $took s after the problems above; removed $DIR"
    else
        log "stopped in $took s with the problems above; state dir kept"
    fi
fi
exit "$status"
