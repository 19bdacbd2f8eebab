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
# shellcheck source-path=SCRIPTDIR source=lib/slurm-common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/slurm-common.sh"

parse_stop_args "$@"

DIR=$(state_dir MN_SLURM_DIR /var/tmp/gpuguard-mn-slurm) || exit 1
CONF=$DIR/etc/slurm.conf
RECORD=$DIR/run/started.pids
CREATED=$DIR/run/created

begin_stop
T0=$(now)

stopped=0
status=0

# 1. cancel the jobs, so that Slurm ends their processes (SIGTERM, KillWait, SIGKILL)
if [ -n "$(pids_of slurmctld)" ] && [ -n "$(pids_of node-init)" ] && [ -r "$CONF" ]; then
    cancel_jobs || status=1
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

# 4. empty cgroup v1 directories the slurmds made in cgroup mode, slurm_<node>
# shellcheck disable=SC2046  # one word a node
remove_cgroup_dirs $(conf_nodes)

took=$(since "$T0")
if [ "$status" = 0 ]; then
    forget_daemons
    if [ "$PURGE" = 1 ]; then
        purge_state_dir
        log "stopped in $took s; removed $DIR"
    elif [ "$stopped" = 0 ]; then log "nothing was running (state kept in $DIR; --purge deletes it)"
    else log "stopped in $took s (state kept in $DIR; --purge deletes it)"
    fi
else
    if [ "$PURGE" = 1 ] && [ -z "$(ns_pids)" ] && [ -z "$(pids_of slurmctld)$(pids_of munged)$(pids_of node-init)" ]; then
        purge_state_dir
        log "cleaned up in $took s after the problems above; removed $DIR"
    else
        log "stopped in $took s with the problems above; state dir kept"
    fi
fi
exit "$status"
